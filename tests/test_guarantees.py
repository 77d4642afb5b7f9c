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
