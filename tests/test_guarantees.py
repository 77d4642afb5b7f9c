"""The guarantees the notes and docs claim, each held by a test that fails when the guarantee is broken: a read-only
harness db cannot be written, the xlsx formula scan streams, the folder lock refuses a link and a lock file replaced
under it, a clip's summary waits for its own captions only, and the seed-noise verdict is the 2-sd rule.
`.ci/breakages.py` applies each breakage to the module and its notebook and checks that the test named beside it fails."""

import asyncio
import os
import tracemalloc

import numpy as np
import pytest

from vtreetrm.utils import UserError, folder_lock

# ---------------------------------------------------------------- harness/store.connect_readonly: SQLite mode=ro


def test_a_readonly_harness_db_refuses_every_write(tmp_path):
    from vtreetrm.harness.store import connect, connect_readonly

    db = tmp_path / "h.db"
    connect(db).close()
    before = db.read_bytes()
    con = connect_readonly(db)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables
    for sql in (f"DELETE FROM {tables[0]}", "CREATE TABLE intruder (x)", "PRAGMA user_version = 99"):
        with pytest.raises(UserError, match="attempt to write a readonly database"):
            con.execute(sql)
    con.close()
    assert db.read_bytes() == before
    with pytest.raises(UserError, match="no such harness db"):
        connect_readonly(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()


# ---------------------------------------------------------------- release/preprocess: the formula scan in one pass


def test_the_formula_scan_holds_one_piece_at_a_time():
    "64 pieces of 1 MiB each, made as they are drawn: the scan's peak memory is a few pieces, not the sheet."
    from vtreetrm.release.preprocess import formula_refs_without_value

    text = b"x" * (1 << 20)
    drawn = []

    def pieces():  # each piece: a formula without a value, one with a value, and a cell holding a mebibyte of text
        for k in range(64):
            drawn.append(k)
            yield b'<c r="B%d"><f>A1*2</f></c><c r="C%d"><f>1</f><v>1</v></c>' % (k, k) + (
                b'<c r="D%d" t="inlineStr"><is><t>%s</t></is></c>' % (k, text)
            )

    tracemalloc.start()
    try:
        refs = formula_refs_without_value(pieces())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert drawn == list(range(64))  # each piece drawn once
    assert refs == {f"B{k}" for k in range(64)}
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB for 64 MiB of sheet: the scan holds the pieces"


# ---------------------------------------------------------------- utils.folder_lock: O_NOFOLLOW and the inode re-check


def test_the_folder_lock_refuses_a_link_in_place_of_its_lock_file(tmp_path):
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    dest = tmp_path / "out"
    (tmp_path / ".out.lock").symlink_to(target)
    with pytest.raises(UserError, match="cannot open its lock file"):
        with folder_lock(dest):
            pass
    assert not target.exists() and (tmp_path / ".out.lock").is_symlink()


@pytest.mark.parametrize("swap", ["removed", "replaced"])
def test_the_folder_lock_refuses_a_lock_file_its_holder_let_go(tmp_path, monkeypatch, swap):
    """Between opening the lock file and locking it, its holder removes it (and another process may make a new one):
    the descriptor locked is then not the file at the path, and holding it would let two writers in."""
    import fcntl

    dest, flock = tmp_path / "out", fcntl.flock
    path = tmp_path / ".out.lock"

    def flock_after_the_holder_left(fd, op):
        path.unlink()
        if swap == "replaced":
            path.write_bytes(b"")
        return flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_left)
    with pytest.raises(UserError, match="is being written by another process"):
        with folder_lock(dest):
            pytest.fail("the lock was taken on a file no longer at its path")
    monkeypatch.setattr(fcntl, "flock", flock)
    with folder_lock(dest):  # and the next try takes it
        assert path.is_file()
    assert not path.exists()


# ---------------------------------------------------------------- harness/trees: no barrier between a video's clips


def test_a_clip_summary_waits_for_its_own_captions_only(tmp_path):
    """The last scene's caption is answered only once a summary was asked for: a build that waits for every caption
    of the video before the first summary never finishes (the wait times out)."""
    from vtreetrm.harness.config import TreeParams
    from vtreetrm.harness.trees import (
        BuildLimits,
        CaptionCache,
        FrameFeatures,
        SimulatedCaptioner,
        _caption_clips,
        tree_plan,
    )
    from vtreetrm.video.synthetic import SPECIES, render_frames, write_mp4

    rng = np.random.default_rng(0)
    scenes = [("forest", "giant panda"), ("snow", "takin"), ("night", "golden monkey")]
    frames = [render_frames([(*SPECIES[sp], "right")], env, n_frames=32, size=64, rng=rng) for env, sp in scenes]
    video = write_mp4(tmp_path / "v.mp4", np.concatenate(frames), fps=8)
    t, x, dur = FrameFeatures(tmp_path / "features", fps=2)(video)
    plan = tree_plan(x, TreeParams(clips=4, segments_per_clip=1, frames_per_segment=1))
    assert len(plan) == 3

    class LastSceneWaits(SimulatedCaptioner):
        def __init__(self):
            self.summarised = asyncio.Event()

        async def caption(self, image):
            if image.mean() < 70:  # the night scene, the last
                await asyncio.wait_for(self.summarised.wait(), 5)
            return await super().caption(image)

        async def summarize(self, captions):
            self.summarised.set()
            return await super().summarize(captions)

    def clips(captioner, cache):
        lim = BuildLimits.of(TreeParams(jobs=3))
        return asyncio.run(_caption_clips(video, t, dur, plan, captioner, cache, TreeParams(), lim))

    plain = clips(SimulatedCaptioner(), CaptionCache(tmp_path / "c1", SimulatedCaptioner.identity))
    waited = clips(LastSceneWaits(), CaptionCache(tmp_path / "c2", SimulatedCaptioner.identity))
    assert [c["summary"] for c in waited] == [c["summary"] for c in plain]
    assert len({c["summary"] for c in plain}) == 3


# ---------------------------------------------------------------- demo.seed_verdict: the 2-sd rule


def test_the_seed_verdict_is_the_two_sd_rule():
    from vtreetrm.demo import seed_verdict

    spread = [0.0, 1.0, 2.0]  # mean 1, sd 1
    assert seed_verdict(spread, [2.99] * 3) == "within seed noise"  # 1.99 < 2 sd
    assert seed_verdict(spread, [3.0] * 3) == "separated"  # exactly 2 sd is not smaller than 2 sd
    assert seed_verdict([3.01] * 3, spread) == "separated"  # either order
    assert seed_verdict(spread, [-0.5] * 3) == "within seed noise"  # 1.5: the difference's size, not its sign
    # the larger of the two sds: 1.5 < 2 x 1, though 1.5 > 2 x 0.1
    assert seed_verdict(spread, [2.4, 2.5, 2.6]) == "within seed noise"
    assert seed_verdict([1.0, 1.0], [5.0, 5.0]) == "separated"  # no spread at all: any difference separates
    assert seed_verdict([1.0], [2.0]) == "one seed: no spread"
    assert seed_verdict([None], [1.0, 2.0]) == "no figure"
    assert seed_verdict([1.0], [1.0, 3.0]) == "within seed noise"  # one side's sd is enough


def test_no_lock_is_left_behind(tmp_path):
    "The lock file is removed on the way out, an exception included, and the umask applies while it exists."
    old = os.umask(0o077)
    try:
        with pytest.raises(RuntimeError):
            with folder_lock(tmp_path / "out"):
                assert (os.stat(tmp_path / ".out.lock").st_mode & 0o777) == 0o600
                raise RuntimeError
    finally:
        os.umask(old)
    assert not (tmp_path / ".out.lock").exists()


def test_the_verdict_margin_and_its_borderline_band():
    from vtreetrm.demo import BORDERLINE, mean_sd, verdict_margin, verdict_text

    assert mean_sd([]) == (None, None, 0) and mean_sd([None, 2.0]) == (2.0, None, 1)
    spread = [0.0, 1.0, 2.0]  # mean 1, sd 1: the bar is 2
    assert verdict_margin([3.0, 4.0, 5.0], spread) == pytest.approx(1.5)
    assert verdict_margin(spread, [3.0, 4.0, 5.0]) == pytest.approx(1.5)  # the difference's size, either order
    assert verdict_margin(spread, [2.4, 2.5, 2.6]) == pytest.approx(0.75)  # the larger sd sets the bar
    assert verdict_margin([1.0, 1.0], [2.0, 2.0]) == float("inf")  # no spread: any difference separates
    assert verdict_margin([1.0], [2.0]) is None and verdict_margin([None], spread) is None
    assert verdict_margin(spread, [None]) is None
    assert BORDERLINE == pytest.approx((2 / 3, 3 / 2))
    assert verdict_text([3.0, 4.0, 5.0], spread) == "separated (borderline: 1.50x the 2-sd bar)"  # the upper edge
    wide = [0.0, 1.5, 3.0]  # mean 1.5, sd 1.5: the bar is 3, and a difference of 2 is exactly 2/3 of it
    assert verdict_text([3.5] * 3, wide) == "within seed noise (borderline: 0.67x the 2-sd bar)"  # the lower edge
    assert verdict_text([3.1, 4.1, 5.1], spread) == "separated"
    assert verdict_text(spread, [2.3, 2.3, 2.3]) == "within seed noise"  # 0.65x
    assert verdict_text(spread, [-0.5, -0.5, -0.5]) == "within seed noise (borderline: 0.75x the 2-sd bar)"
    assert verdict_text([1.0], [2.0]) == "one seed: no spread"


def _gate(n=20, nz=2, **kw) -> dict:
    "A rollout gate report that holds together: `nz` of the first `min(n, 200)` episodes rewarded."
    from vtreetrm.release.rollout import GATE_RANGE

    eps = [{"sample_id": f"s{i}", "reward": 1.0 if i < nz else 0.0} for i in range(min(n, 200))]
    g = {"denominator": n, "nonzero_reward_numerator": nz, "nonzero_reward_rate": nz / n,
         "gate_range": list(GATE_RANGE), "episodes": eps, "status": "passed", "passed": True}  # fmt: skip
    return {**g, **kw}


def test_the_rollout_gate_verdict_is_rederived_at_its_band_edges(tmp_path):
    from vtreetrm.release.rollout import check_gate_report

    where = tmp_path / "gate.json"
    assert check_gate_report(_gate(20, 1), where)["denominator"] == 20  # 5%: the lower edge passes
    assert check_gate_report(_gate(10, 3), where)["denominator"] == 10  # 30%: the upper edge passes
    for n, nz, shown in ((20, 0, "0/20 nonzero = 0.00%"), (100, 31, "31/100 nonzero = 31.00%"), (1, 0, "0/1")):
        with pytest.raises(UserError, match="the rollout gate did not pass") as e:
            check_gate_report(_gate(n, nz, status="failed", passed=False), where)
        assert shown in str(e.value) and "(need 5%-30%)" in str(e.value) and str(where) in str(e.value)
    with pytest.raises(UserError, match="says status 'failed'"):  # figures that pass, a report that says it failed
        check_gate_report(_gate(20, 2, status="failed"), where)


def test_the_rollout_gate_report_is_refused_where_its_figures_do_not_hold(tmp_path):
    from vtreetrm.release.rollout import check_gate_report

    where = tmp_path / "gate.json"

    def refused(g, field, *texts):
        with pytest.raises(UserError) as e:
            check_gate_report(g, where)
        msg = str(e.value)
        assert str(where) in msg and f"field '{field}'" in msg and all(t in msg for t in texts), msg

    refused(_gate(20, 2, denominator=0), "denominator", "denominator is 0")
    refused(_gate(20, 2, nonzero_reward_numerator=-1), "nonzero_reward_numerator", "-1")
    refused(_gate(20, 2, nonzero_reward_rate=0.1 + 1e-3), "nonzero_reward_rate", "is not 2/20")
    assert check_gate_report(_gate(20, 2, nonzero_reward_rate=0.1 + 1e-7), where)  # a rounded rate is the same rate
    refused(_gate(20, 2, episodes=None), "episodes", "lists no episodes, not the first 20 of 20")
    refused(_gate(20, 2, episodes=_gate(20, 2)["episodes"][:5]), "episodes", "lists 5 episodes")
    eps = _gate(20, 2)["episodes"]
    refused(_gate(20, 2, episodes=[*eps[:-1], "text"]), "episodes", "without a numeric reward")
    refused(_gate(20, 2, episodes=[*eps[:-1], {**eps[-1], "reward": "1"}]), "episodes", "without a numeric reward")
    twice = [*eps[:-1], {**eps[-1], "sample_id": "s3"}]
    refused(_gate(20, 2, episodes=twice), "episodes", 'counts sample_id "s3" more than once')
    refused(_gate(20, 3, episodes=eps), "episodes", "have 2 nonzero rewards: not 3/20")
    refused(_gate(20, 2, model="m"), "model", "must be a model identity")


def test_a_harness_db_waits_as_long_as_it_is_told_and_names_a_missing_column(tmp_path):
    import sqlite3

    from vtreetrm.harness.store import connect, connect_readonly

    db = tmp_path / "h.db"
    con = connect(db, timeout=2.5)
    assert con.execute("PRAGMA busy_timeout").fetchone()[0] == 2500  # SQLite itself waits for a writer that long
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    ro = connect_readonly(db, timeout=1.5)
    assert ro.execute("PRAGMA busy_timeout").fetchone()[0] == 1500
    table = next(r[0] for r in ro.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    cols = [r[1] for r in ro.execute(f"PRAGMA table_info({table})")]
    ro.close()
    plain = sqlite3.connect(db)
    keep = cols[0]
    for c in cols[1:3]:
        plain.execute(f"ALTER TABLE {table} DROP COLUMN {c}")
    plain.commit()
    plain.close()
    with pytest.raises(UserError) as e:
        connect_readonly(db)
    assert f"it has no columns {', '.join(sorted(cols[1:3]))} of table '{table}'" in str(e.value), (str(e.value), keep)


# ---------------------------------------------------------------- harness/gate: the CE-Gate's arithmetic, exactly


def test_the_e_process_bets_and_re_estimates_its_bet_exactly():
    import math

    from vtreetrm.harness.gate import EProcess, GateParams

    p = GateParams(lambda_dir=0.4, p_low=0.05, p_high=0.95, block=2)
    e = EProcess(p)
    assert (e.lam, e.k, e.n, e.in_block) == (0.4, 1.0, 0, 0)
    e.update(0)  # a concordant pair: no bet, no count
    assert (e.log_k, e.n, e.in_block) == (0.0, 0, 0)
    e.update(1)
    assert e.log_k == pytest.approx(math.log(1.4)) and (e.wins, e.losses, e.in_block) == (1, 0, 1)
    e.update(-1)  # the block of 2 is full: the bet re-estimated from (1 + 1) / (2 + 2) = 1/2, so no bet
    assert e.log_k == pytest.approx(math.log(1.4 * 0.6)) and (e.wins, e.losses, e.in_block, e.lam) == (1, 1, 0, 0.0)
    e.update(1)
    e.update(1)  # 3 wins, 1 loss: (3 + 1) / (4 + 2) = 2/3, a bet of 1/3
    assert e.log_k == pytest.approx(math.log(1.4 * 0.6)) and e.lam == pytest.approx(1 / 3) and e.n == 4
    assert e.k == pytest.approx(0.84)
    assert EProcess(GateParams(lambda_dir=0.9, p_high=0.8)).lam == pytest.approx(0.6)  # at most 2 p_high - 1
    assert EProcess(GateParams(lambda_dir=-0.3)).lam == pytest.approx(0.3)  # the bet's size
    hi = EProcess(GateParams(p_high=0.8, block=1))
    for _ in range(10):
        hi.update(1)
    assert hi.lam == pytest.approx(0.6)  # the estimate clipped at p_high
    lo = EProcess(GateParams(p_low=0.3, p_high=0.95, block=1))
    lo.update(1)
    assert lo.lam == pytest.approx(2 * (2 / 3) - 1)
    for _ in range(5):
        lo.update(-1)
    assert lo.lam == 0.0  # clipped at p_low = 0.3, then never a negative bet
    mid = EProcess(GateParams(p_low=0.45, p_high=0.95, block=1))
    mid.update(-1)  # (0 + 1) / (1 + 2) = 1/3, clipped up to 0.45: a bet of max(0, -0.1) = 0
    assert mid.lam == 0.0
    d = EProcess(p)
    for start, after in ((2.0, 1.0), (-1.0, -1.0), (0.0, 0.0)):  # shrinks evidence for, never against
        d.log_k = start
        d.decay(0.5)
        assert d.log_k == after


def test_a_gate_round_decides_by_its_rules():
    from vtreetrm.harness.gate import GateParams, GateRound

    p = GateParams(e_confirm=4.0, e_provisional=1.5, w_net_min=2, delta_min=0.1, lambda_dir=0.5, block=100,
                   n_max=6, guard_err=0.5, p_high=0.95)  # fmt: skip
    r = GateRound(p)
    r.add(False, True)
    r.add(True, True)
    r.add(False, True)  # K = 1.5^2 = 2.25, net 2 over 3 pairs
    assert (r.n_pairs, r.round_discordant, r.confirmed, r.done) == (3, 2, False, False)
    d = r.decision()
    assert (d.decision, d.reason) == ("provisional", "K=2.25 >= 1.5") and (d.wins, d.losses, d.n_pairs) == (2, 0, 3)
    r.add(False, True)
    r.add(False, True)  # K = 1.5^4 >= 4
    assert r.confirmed and r.done
    d = r.decision()
    assert d.decision == "confirm" and d.reason == "K=5.06 >= 4.0" and d.e_value == pytest.approx(1.5**4)
    assert d.to_dict()["n_pairs"] == 5 and d.e_reverse == 1.0
    small = GateRound(GateParams(e_confirm=1.2, e_provisional=1.1, w_net_min=2, delta_min=0.0, lambda_dir=0.5))
    small.add(False, True)  # K = 1.5 >= 1.2, but a net of 1 is below w_net_min
    assert not small.confirmed and small.decision().reason == "practical size: net 1 over 1 pairs"
    thin = GateRound(GateParams(e_confirm=2.0, e_provisional=1.1, w_net_min=2, delta_min=0.1, lambda_dir=0.5))
    thin.add(False, True)
    thin.add(False, True)
    for _ in range(18):
        thin.add(True, True)  # net 2 over 20 pairs: 0.1 per pair, exactly delta_min
    assert thin.confirmed
    thin.add(True, True)  # 2 over 21: below it
    assert not thin.confirmed and thin.decision().decision == "reject"
    guard = GateRound(p)
    for right in (False, True, False):
        guard.add(True, right, probe=True)
    d = guard.decision()
    assert (d.decision, d.reason, d.n_probe, d.probe_errors) == ("reject", "guard: 2/3 probe errors > 0.5", 3, 2)
    edge = GateRound(p)
    edge.add(True, False, probe=True)
    edge.add(True, True, probe=True)  # 1/2 probe errors: at guard_err, allowed
    assert edge._guard() and edge.decision().reason.startswith("practical size")
    weak = GateRound(GateParams(e_provisional=3.0, w_net_min=0, delta_min=0.0, lambda_dir=0.5, n_max=2))
    weak.add(False, True)
    weak.add(True, False)  # K = 1.5 * 0.5: two discordant pairs end the round
    assert weak.done and weak.decision().reason == "K=0.75 < 3.0"


def test_a_watched_edit_is_confirmed_rolled_back_or_settled():
    from vtreetrm.harness.gate import EProcess, GateParams, Watch

    p = GateParams(e_confirm=2.0, e_rollback=2.0, lambda_dir=0.5, block=3, n_max=5, gamma_decay=0.5)
    w = Watch(p, EProcess(p), "provisional", parent="v0", edit="v1", patches=({"op": "x"},))
    assert (w.parent, w.edit, w.patches, w.pairs) == ("v0", "v1", [{"op": "x"}], 0)
    assert w.add(True, True) is None and w.pairs == 1
    assert w.add(False, True) is None  # forward K 1.5
    assert w.add(False, True) == "confirm" and w.status == "confirmed"  # 2.25 >= 2
    assert w.add(False, True) is None  # confirmed once
    assert not w.settled and w.rev.n == 3
    w.add(True, False)
    assert w.rev.n == 4 and not w.settled
    w.add(True, True)
    assert not w.settled
    w.add(True, False)
    assert w.settled  # a confirmed edit: n_max = 5 discordant pairs
    back = Watch(p, EProcess(p), "provisional")
    assert back.add(True, False) is None and back.add(True, False) == "rollback" and back.status == "rolled_back"
    prov = Watch(GateParams(e_confirm=100.0, e_rollback=100.0, lambda_dir=0.5, block=3), EProcess(p), "provisional")
    for pair in ((False, True), (True, False), (False, True)):
        prov.add(*pair)
    assert prov.settled and prov.status == "provisional"  # after `block` discordant pairs, kept as it is
    fwd = EProcess(p)
    fwd.log_k = 2.0
    Watch(p, fwd, "confirmed").new_step()
    assert fwd.log_k == 1.0  # each step shrinks the carried evidence by gamma_decay


def test_the_gate_thresholds_are_inclusive_and_the_net_is_wins_minus_losses():
    from vtreetrm.harness.gate import EProcess, GateParams, GateRound, Watch

    d = EProcess(GateParams())
    d.log_k = 0.5
    d.decay(0.5)
    assert d.log_k == 0.25  # any evidence for is shrunk, however small
    one = GateRound(GateParams(w_net_min=1, delta_min=0.6, e_confirm=100.0))
    one.add(False, True)
    assert one._practical()  # 1 over 1 pair
    mixed = GateRound(GateParams(w_net_min=2, delta_min=0.0, e_confirm=100.0, lambda_dir=0.5))
    for inc, cand in ((False, True), (False, True), (True, False)):
        mixed.add(inc, cand)
    assert not mixed._practical() and mixed.decision().reason == "practical size: net 1 over 3 pairs"
    probe = GateRound(GateParams(w_net_min=0, delta_min=0.0, e_confirm=100.0, lambda_dir=0.5))
    probe.add(False, True)
    at = GateRound(GateParams(w_net_min=0, delta_min=0.0, e_confirm=100.0, e_provisional=probe.fwd.k, lambda_dir=0.5))
    at.add(False, True)
    assert at.decision().decision == "provisional"  # K exactly at e_provisional
    base = GateParams(e_confirm=100.0, e_rollback=100.0, lambda_dir=0.5)
    w = Watch(base, EProcess(base), "provisional")
    w.add(True, False)
    w.add(True, False)
    assert w.pairs == 2
    edge = GateParams(e_confirm=100.0, e_rollback=w.rev.k, lambda_dir=0.5)
    w2 = Watch(edge, EProcess(edge), "provisional")
    w2.add(True, False)
    assert w2.add(True, False) == "rollback"  # the reverse wealth exactly at e_rollback
    f = Watch(base, EProcess(base), "provisional")
    f.add(False, True)
    conf = GateParams(e_confirm=f.fwd.k, e_rollback=100.0, lambda_dir=0.5)
    assert Watch(conf, EProcess(conf), "provisional").add(False, True) == "confirm"  # exactly at e_confirm
