"CE-Gate: validity under the null by simulation (2,000 runs each), power at +15 points, rollback and discounting."

import math
import random

import pytest

from vtreetrm.harness.gate import EProcess, GateParams, GateRound, Watch, simulate_gate


@pytest.mark.parametrize("p_win,p_loss", [(0.15, 0.15), (0.25, 0.25), (0.05, 0.05), (0.10, 0.20)])
def test_null_confirm_rate_at_most_5_percent(p_win, p_loss):
    res = simulate_gate(p_win, p_loss, n_runs=2000, seed=11)
    print(f"null p_win={p_win} p_loss={p_loss}: confirm {res['confirm']:.4f}")
    assert res["confirm"] <= 0.05


def test_null_bound_holds_without_practical_checks_or_guard():
    # the pure e-process: confirmations only from K >= 20, looking after every pair, long runs
    p = GateParams(w_net_min=0, delta_min=0.0, guard_err=1.0, n_max=400, probe_quota=0.0)
    res = simulate_gate(0.3, 0.3, n_runs=2000, params=p, seed=5, max_pairs=2000)
    print(f"null, no practical checks, n_max=400: confirm {res['confirm']:.4f}")
    assert res["confirm"] <= 0.05


def test_power_plus_15_points():
    corr = simulate_gate(0.18, 0.03, n_runs=2000, seed=2)
    ind = simulate_gate(0.325, 0.175, n_runs=2000, seed=3)
    print(
        f"+15 points correlated: confirm {corr['confirm']:.3f} provisional {corr['provisional']:.3f}; "
        f"independent: confirm {ind['confirm']:.3f} provisional {ind['provisional']:.3f}"
    )
    assert corr["confirm"] >= 0.8
    assert ind["confirm"] > simulate_gate(0.25, 0.25, n_runs=2000, seed=3)["confirm"]  # some power even then


def test_decay_never_raises_wealth_and_keeps_bound():
    p = GateParams()
    for lk in (-2.0, -0.1, 0.0, 0.5, 3.0):
        e = EProcess(p)
        e.log_k = lk
        before = e.k
        e.decay(0.9)
        assert e.k <= before + 1e-12 and (lk <= 0 or e.k >= 1)
    # a null process decayed at every step confirms no more often than the plain one
    rng, hits = random.Random(0), 0
    for _ in range(2000):
        e = EProcess(p)
        for _step in range(10):
            e.decay(p.gamma_decay)
            for _ in range(10):
                u = rng.random()
                e.update(1 if u < 0.2 else -1 if u < 0.4 else 0)
            if e.k >= p.e_confirm:
                hits += 1
                break
    assert hits / 2000 <= 0.05


def test_rollback_rate_for_good_edits_and_detection_of_bad():
    p = GateParams()

    def run(p_win, p_loss, seed):
        rng, rolled = random.Random(seed), 0
        for _ in range(2000):
            w = Watch(p, EProcess(p), "provisional")
            for _ in range(100):
                u = rng.random()
                d = 1 if u < p_win else -1 if u < p_win + p_loss else 0
                if w.add(d < 0, d > 0) == "rollback":
                    rolled += 1
                    break
        return rolled / 2000

    equal, bad = run(0.2, 0.2, 1), run(0.05, 0.25, 2)
    print(f"rollback rate: equal {equal:.4f}, clearly worse {bad:.3f}")
    assert equal <= 0.10 and bad >= 0.9


def test_round_decisions_and_practical_checks():
    p = GateParams()
    r = GateRound(p)
    for _ in range(7):
        r.add(False, True)
    assert r.done and r.decision().decision == "confirm" and r.fwd.k >= 20
    r = GateRound(GateParams(w_net_min=10))
    for _ in range(8):
        r.add(False, True)
    assert not r.done and r.decision().decision == "reject" and "practical" in r.decision().reason
    r = GateRound(GateParams(delta_min=0.5))
    for _ in range(8):
        r.add(False, True)
    for _ in range(40):
        r.add(True, True)
    assert r.decision().decision == "reject"
    r = GateRound(p)
    for _ in range(41):
        r.add(True, False)
    assert r.done and r.decision().decision == "reject"
    # the first bet is |gate_lambda_dir|
    r = GateRound(GateParams(lambda_dir=-0.3))
    r.add(False, True)
    assert math.isclose(r.fwd.k, 1.3)
