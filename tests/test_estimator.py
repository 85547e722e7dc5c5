"""Ratio estimator: exactness, apportioning, unsampled rule, statistics."""

import random
from collections import defaultdict

import pytest

from gpu_agent.join.estimator import CarriedStacks, Estimate, EstimatedRow, apportion, estimate

K1 = (100, 0, 7, 0, 1)
K2 = (100, 0, 7, 0, 2)
K3 = (200, 1, 0, 5, 1)


def _sums(rows):
    s = defaultdict(lambda: [0, 0])
    for r in rows:
        s[r.key][0] += r.gpu_ns
        s[r.key][1] += r.launches
    return {k: tuple(v) for k, v in s.items()}


def test_apportion_largest_remainder():
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]  # tie -> lowest index
    assert apportion(10, [1, 1, 1], tiebreak=[3, 2, 1]) == [3, 3, 4]
    assert apportion(7, [0.5, 0.25, 0.25]) == [3, 2, 2]  # 3.5 1.75 1.75; floats are exact
    # 100 * [0.334, 0.333, 0.333] -> 33.4, 33.3, 33.3 -> floors 33,33,33 + 1 to the first
    assert apportion(100, [334, 333, 333]) == [34, 33, 33]
    # remainders .6 .3 .1 with 1 leftover -> the largest remainder wins, not the largest weight
    assert apportion(10, [16, 53, 31]) == [2, 5, 3]
    assert apportion(0, [1, 2]) == [0, 0]
    assert apportion(5, [0, 3]) == [0, 5]
    assert sum(apportion(10**15 + 7, [3, 5, 7, 11, 13])) == 10**15 + 7
    with pytest.raises(ValueError):
        apportion(5, [0, 0])
    with pytest.raises(ValueError):
        apportion(5, [-1, 2])


def test_exact_totals_and_shares():
    totals = {K1: (1_000_003, 101), K2: (999, 3)}
    sampled = {
        K1 + (11,): (300, 2, 300 * 64, 2 * 64),
        K1 + (12,): (100, 1, 100 * 64, 64),
        K1 + (13,): (50, 1, 50, 1),  # forced sample: weight 1
        K2 + (11,): (333, 1, 333, 1),
    }
    est = estimate(totals, sampled)
    assert isinstance(est, Estimate)
    assert est.orphan_entries == 0 and est.unsampled_keys == 0
    assert _sums(est.rows) == totals
    by = {(r.key, r.stack_id): r for r in est.rows}
    # weighted ns: 19200, 6400, 50 of 25650
    w = [19200, 6400, 50]
    exp = apportion(1_000_003, w)
    assert [by[(K1, s)].gpu_ns for s in (11, 12, 13)] == exp
    # launches split by weighted launches: 128, 64, 1 of 193
    assert [by[(K1, s)].launches for s in (11, 12, 13)] == apportion(101, [128, 64, 1])
    assert by[(K2, 11)] == EstimatedRow(K2, 11, 999, 3)
    # sorted by key, stack
    assert [(r.key, r.stack_id) for r in est.rows] == sorted((r.key, r.stack_id) for r in est.rows)


def test_forced_weight_one_sample_is_not_inflated():
    # One forced sample (weight 1) + sampled launches at weight 64 of another stack:
    # the forced stack represents only itself.
    totals = {K1: (64 * 100 * 10 + 100, 641)}
    sampled = {
        K1 + (1,): (100, 1, 100, 1),  # forced first launch
        K1 + (2,): (1000, 10, 1000 * 64, 640),
    }
    est = estimate(totals, sampled)
    by = {r.stack_id: r for r in est.rows}
    assert by[1].gpu_ns == 100 and by[1].launches == 1
    assert by[2].gpu_ns == 64000 and by[2].launches == 640


def test_unsampled_and_zero_weights():
    totals = {K1: (500, 5), K2: (700, 7), K3: (0, 0)}
    sampled = {K2 + (9,): (0, 0, 0, 0)}  # all-zero weights
    est = estimate(totals, sampled)
    assert est.rows == [EstimatedRow(K1, None, 500, 5), EstimatedRow(K2, None, 700, 7)]
    assert est.unsampled_keys == 3


def test_ns_zero_falls_back_to_launch_weights():
    totals = {K1: (90, 9)}
    sampled = {K1 + (1,): (0, 1, 0, 2), K1 + (2,): (0, 1, 0, 1)}
    est = estimate(totals, sampled)
    assert [(r.stack_id, r.gpu_ns, r.launches) for r in est.rows] == [(1, 60, 6), (2, 30, 3)]


def test_orphans_counted_and_ignored():
    totals = {K1: (100, 1)}
    sampled = {K1 + (1,): (100, 1, 100, 1), K3 + (1,): (5, 1, 320, 64), K3 + (2,): (5, 1, 5, 1)}
    est = estimate(totals, sampled)
    assert est.orphan_entries == 2 and est.orphan_weighted_ns == 325
    assert est.rows == [EstimatedRow(K1, 1, 100, 1)]


def test_accepts_iterables():
    est = estimate([(K1, (10, 2))], [(K1 + (3,), (10, 2, 10, 2))])
    assert est.rows == [EstimatedRow(K1, 3, 10, 2)]


def test_a_kernel_sampled_nowhere_here_takes_its_stacks_from_where_it_last_was():
    carried = CarriedStacks()
    first = estimate({K1: (400, 4), K2: (100, 1)}, {K1 + (1,): (300, 3, 300, 3), K1 + (2,): (100, 1, 100, 1)}, carried)
    carried.keep(first.sampled_weights)
    assert first.unsampled_keys == 1 and first.carried_keys == 0  # K2: never sampled
    # K1 unsampled here: split 3:1 as before; K2 still [unsampled]
    second = estimate({K1: (800, 8), K2: (100, 1)}, {}, carried)
    assert [(r.key, r.stack_id, r.gpu_ns, r.launches) for r in second.rows] == [
        (K1, 1, 600, 6),
        (K1, 2, 200, 2),
        (K2, None, 100, 1),
    ]
    assert second.carried_keys == 1 and second.unsampled_keys == 1
    carried.keep(second.sampled_weights)  # nothing sampled: the earlier split stays
    # sampled again: its own samples here, and they replace the carried split
    third = estimate({K1: (100, 1)}, {K1 + (5,): (100, 1, 64, 64)}, carried)
    carried.keep(third.sampled_weights)
    assert [(r.stack_id, r.gpu_ns) for r in third.rows] == [(5, 100)] and third.carried_keys == 0
    assert [(r.stack_id, r.gpu_ns) for r in estimate({K1: (10, 1)}, {}, carried).rows] == [(5, 10)]
    # another process's key is not K1's
    assert estimate({K3: (10, 1)}, {}, carried).unsampled_keys == 1
    carried.forget({100})
    assert len(carried) == 0 and estimate({K1: (10, 1)}, {}, carried).unsampled_keys == 1


def test_carried_stacks_are_bounded():
    carried = CarriedStacks()
    many = {K1 + (s,): (s, 1, s, 1) for s in range(1, 101)}
    carried.keep(estimate({K1: (100, 1)}, many).sampled_weights)
    assert sorted(carried.get(K1)) == list(range(101 - CarriedStacks.MAX_STACKS, 101))  # the heaviest
    # the collector's keys: tgid, device, stream, graph, kernel, capture stack, flags, start tag
    keys = [(100, 0, 7, 0, k, 0, 0, 77) for k in range(CarriedStacks.MAX_KEYS + 10)]
    for k in keys:
        carried.keep({k: {1: [1, 1]}})
    assert len(carried) == 1 + CarriedStacks.MAX_KEYS  # K1's (its own process) and these
    assert carried.get(keys[0]) is None and carried.get(keys[-1]) == {1: [1, 1]}  # the oldest out
    # in all: the process with the most gives way
    carried.MAX_ALL_KEYS = CarriedStacks.MAX_KEYS + 1
    carried.keep({(200, 0, 7, 0, 1, 0, 0, 5): {1: [1, 1]}})
    assert len(carried) == carried.MAX_ALL_KEYS and carried.get((200, 0, 7, 0, 1, 0, 0, 5))
    assert carried.get(K1) is not None and carried.get(keys[10]) is None


def _simulate(rng, n_launches, period, stacks, first_forced=True):
    """Per-launch Bernoulli(1/period) sampling (weight=period), first launch forced (weight 1)."""
    names = [s[0] for s in stacks]
    probs = [s[1] for s in stacks]
    true_ns = defaultdict(int)
    true_n = defaultdict(int)
    sampled = defaultdict(lambda: [0, 0, 0, 0])
    total_ns = 0
    for i in range(n_launches):
        st = rng.choices(names, probs)[0]
        mean = dict((s[0], s[2]) for s in stacks)[st]
        ns = int(mean * (0.5 + rng.random())) + 1
        true_ns[st] += ns
        true_n[st] += 1
        total_ns += ns
        if i == 0 and first_forced:
            w = 1
        elif rng.random() < 1.0 / period:
            w = period
        else:
            continue
        e = sampled[K1 + (st,)]
        e[0] += ns
        e[1] += 1
        e[2] += ns * w
        e[3] += w
    totals = {K1: (total_ns, n_launches)}
    return totals, {k: tuple(v) for k, v in sampled.items()}, true_ns, true_n


STACKS = [(1, 0.50, 1000), (2, 0.25, 4000), (3, 0.15, 200), (4, 0.10, 8000)]


def test_statistical_accuracy_period_64():
    rng = random.Random(12345)
    totals, sampled, true_ns, true_n = _simulate(rng, 150_000, 64, STACKS)
    est = estimate(totals, sampled)
    assert _sums(est.rows) == totals
    total_ns, total_n = totals[K1]
    got = {r.stack_id: r for r in est.rows}
    for s, *_ in STACKS:
        share_true = true_ns[s] / total_ns
        share_est = got[s].gpu_ns / total_ns
        assert abs(share_est - share_true) < 0.05, (s, share_est, share_true)  # ~3 sigma
        assert abs(got[s].launches / total_n - true_n[s] / total_n) < 0.02


def test_share_estimate_has_no_systematic_bias():
    # Mean estimated share over many small intervals ~ true share.
    rng = random.Random(7)
    errs = defaultdict(float)
    trials = 120
    for _ in range(trials):
        totals, sampled, true_ns, _ = _simulate(rng, 3000, 64, STACKS)
        est = estimate(totals, sampled)
        total_ns = totals[K1][0]
        got = defaultdict(int)
        for r in est.rows:
            got[r.stack_id] += r.gpu_ns
        for s, *_ in STACKS:
            errs[s] += (got[s] - true_ns[s]) / total_ns
    for s, *_ in STACKS:
        assert abs(errs[s] / trials) < 0.02, (s, errs[s] / trials)
