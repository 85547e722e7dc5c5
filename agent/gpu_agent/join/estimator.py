"""Ratio estimator: split each kernel's exact GPU time across sampled stacks.

One job: given, for one interval,

* ``totals``:  exact per-kernel counters
  ``(tgid, device_id, stream_id, graph_id, kernel_id) -> (gpu_ns, launches)``
* ``sampled``: counters of the SAMPLED launches, keyed additionally by stack
  ``(tgid, device_id, stream_id, graph_id, kernel_id, stack_id) ->
  (gpu_ns, launches, weighted_ns, weighted_launches)`` where each launch was
  weighted by its inverse sampling probability (1 for forced samples),

produce integer rows ``(key, stack_id | None, gpu_ns, launches)`` whose per-key
sums are EXACTLY the totals.  (Keys may carry more fields, e.g. a graph
kernel's capture stack: a sampled key is always its total key plus the stack.)
See docs/estimator.md for the statistics.

Rules:

* gpu_ns of key K is split in proportion to the sampled stacks'
  ``weighted_ns`` (all zero: ``weighted_launches``); launches in proportion to
  ``weighted_launches`` (all zero: ``weighted_ns``).  Both are ratio
  estimators of the Horvitz-Thompson per-stack estimates against the exact
  total.
* Integers by largest remainder: floors first, the leftover units go to the
  largest fractional remainders (ties: larger weight, then smaller stack_id).
* K with no sampled entries, or only zero weights: its stacks' weights from the
  last interval where K was sampled (``carried``, when given: rows counted in
  ``Estimate.carried_keys``); else one row with ``stack_id=None`` carrying all
  of K's time (rendered under ``[unsampled]``; time is never dropped).
* Sampled entries whose K has no total (a race between map drains) are
  ignored and counted in ``Estimate.orphan_entries``.
* Rows whose gpu_ns and launches both come out 0 are not emitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..probes import contract as C

# ---- splitting each kernel's GPU time across its sampled stacks ----

__all__ = [
    "TotalKey",
    "SampledKey",
    "EstimatedRow",
    "Estimate",
    "apportion",
    "estimate",
    "CarriedStacks",
]

TotalKey = Tuple[int, int, int, int, int]  # tgid, device_id, stream_id, graph_id, kernel_id
SampledKey = Tuple[int, int, int, int, int, int]  # TotalKey + stack_id
TotalValue = Tuple[int, int]  # gpu_ns, launches
SampledValue = Tuple[int, int, Real, Real]  # gpu_ns, launches, weighted_ns, weighted_launches


@dataclass(frozen=True)
class EstimatedRow:
    key: TotalKey
    stack_id: Optional[int]  # None: unsampled
    gpu_ns: int
    launches: int


@dataclass
class Estimate:
    rows: List[EstimatedRow] = field(default_factory=list)
    orphan_entries: int = 0  # sampled entries with no matching total (ignored)
    orphan_weighted_ns: Real = 0  # their summed weighted_ns (for diagnostics)
    unsampled_keys: int = 0  # totals that got a single stack_id=None row
    carried_keys: int = 0  # totals split by their stacks of an earlier interval
    sampled_weights: Dict[TotalKey, Dict[int, List]] = field(default_factory=dict)  # this one's, by key


def _exact(x: Real) -> Union[int, Fraction]:
    if isinstance(x, int):
        return x
    f = Fraction(x)  # floats convert exactly
    return f.numerator if f.denominator == 1 else f


def apportion(total: int, weights: Sequence[Real], tiebreak: Optional[Sequence] = None) -> List[int]:
    """Split integer ``total`` in proportion to ``weights`` (largest remainder).

    The result sums exactly to ``total``.  Weights must be >= 0 with a positive
    sum.  Ties in remainder go to the larger weight, then to the smaller
    ``tiebreak`` value (default: the index).
    """
    total = int(total)
    if total < 0:
        raise ValueError("total must be >= 0")
    ws = [_exact(w) for w in weights]
    if any(w < 0 for w in ws):
        raise ValueError("weights must be >= 0")
    wsum = sum(ws)
    if wsum <= 0:
        raise ValueError("weights must have a positive sum")
    # Scale to integers so that all arithmetic is exact.
    den = 1
    for w in ws:
        if isinstance(w, Fraction):
            den = den * w.denominator // math.gcd(den, w.denominator)
    iw = [int(w * den) for w in ws]
    isum = sum(iw)
    shares = []
    rems = []
    for w in iw:
        q, r = divmod(total * w, isum)
        shares.append(q)
        rems.append(r)
    left = total - sum(shares)
    if left:
        tb = list(tiebreak) if tiebreak is not None else list(range(len(iw)))
        order = sorted(range(len(iw)), key=lambda i: (-rems[i], -iw[i], tb[i]))
        for i in order[:left]:
            shares[i] += 1
    return shares


def _items(m) -> Iterable:
    return m.items() if isinstance(m, Mapping) else m


def estimate(
    totals: Union[Mapping[TotalKey, TotalValue], Iterable[Tuple[TotalKey, TotalValue]]],
    sampled: Union[Mapping[SampledKey, SampledValue], Iterable[Tuple[SampledKey, SampledValue]]],
    carried: Optional["CarriedStacks"] = None,
) -> Estimate:
    """Apportion each total across its sampled stacks (a key sampled nowhere here:
    across its stacks in carried, if any).  See the module doc.

    Rows come out sorted by key, then stack_id (None only appears alone).
    """
    tot: Dict[TotalKey, Tuple[int, int]] = {}
    for k, v in _items(totals):
        k = tuple(k)
        ns, n = int(v[0]), int(v[1])
        if k in tot:  # tolerate duplicate deliveries by summing
            ns += tot[k][0]
            n += tot[k][1]
        tot[k] = (ns, n)

    by_key: Dict[TotalKey, Dict[int, List]] = {}
    out = Estimate()
    for k, v in _items(sampled):
        tk = tuple(k[:-1])  # any total key; the stack comes last
        stack = k[-1]
        wns, wl = _exact(v[2]), _exact(v[3])
        if tk not in tot:
            out.orphan_entries += 1
            out.orphan_weighted_ns += wns
            continue
        acc = by_key.setdefault(tk, {}).setdefault(stack, [0, 0])
        acc[0] += wns
        acc[1] += wl

    out.sampled_weights = by_key
    for tk in sorted(tot):
        ns, n = tot[tk]
        stacks = by_key.get(tk)
        if not _weighed(stacks) and carried is not None:
            stacks = carried.get(tk)
            out.carried_keys += stacks is not None
        ids = sorted(stacks) if stacks else []
        wns = [max(stacks[s][0], 0) for s in ids]
        wl = [max(stacks[s][1], 0) for s in ids]
        if not ids or (sum(wns) <= 0 and sum(wl) <= 0):
            out.unsampled_keys += 1
            if ns or n:
                out.rows.append(EstimatedRow(tk, None, ns, n))
            continue
        ns_w = wns if sum(wns) > 0 else wl
        n_w = wl if sum(wl) > 0 else wns
        ns_parts = apportion(ns, ns_w, ids)
        n_parts = apportion(n, n_w, ids)
        for s, a, b in zip(ids, ns_parts, n_parts):
            if a or b:
                out.rows.append(EstimatedRow(tk, s, a, b))
    return out


def _weighed(stacks) -> bool:
    return bool(stacks) and any(v[0] > 0 or v[1] > 0 for v in stacks.values())


class CarriedStacks:
    """Each kernel key's stacks as its last sampled interval weighed them, for the
    intervals where none of its launches was sampled.

    Why: a stack is sampled at one launch in sample_period (and at a function's first
    launch); a kernel that runs a few times an interval, however long (a model's
    prefill GEMM and attention, once a `generate`), often has no sampled launch in an
    interval. Its time went to ``[unsampled]``: 4.8 % of Llama decode's GPU time on an
    H200 (docs/benchmarks.md). A kernel's launch sites move slowly against a 10 s
    interval, so its last sampled split is the best estimate there is; a kernel never
    sampled stays ``[unsampled]``.

    Bounded: MAX_KEYS kernel keys a process (its least recently sampled out first),
    MAX_ALL_KEYS in all (out of the process with the most), each with its MAX_STACKS
    heaviest stacks; ``forget`` drops exited processes. Keys are the collector's: the
    process (tgid) first, its start tag last."""

    MAX_KEYS = 2048
    MAX_ALL_KEYS = 16384
    MAX_STACKS = 8

    def __init__(self) -> None:
        self._by_proc: Dict[Tuple[int, int], Dict[TotalKey, Dict[int, List]]] = {}

    @staticmethod
    def _proc(key: TotalKey) -> Tuple[int, int]:
        return key[0], key[-1]  # tgid, process start tag (the key's last field)

    def get(self, key: TotalKey) -> Optional[Dict[int, List]]:
        keys = self._by_proc.get(self._proc(key))
        return keys.get(key) if keys else None

    def keep(self, sampled_weights: Mapping[TotalKey, Dict[int, List]]) -> None:
        """An interval's sampled weights (Estimate.sampled_weights) replace each of
        their keys' earlier ones."""
        for key, stacks in sampled_weights.items():
            if not _weighed(stacks):
                continue
            keys = self._by_proc.setdefault(self._proc(key), {})
            keys.pop(key, None)  # re-inserted last: the most recently sampled
            if len(stacks) > self.MAX_STACKS:
                stacks = dict(sorted(stacks.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))[: self.MAX_STACKS])
            keys[key] = {s: list(v) for s, v in stacks.items()}
            while len(keys) > self.MAX_KEYS:
                del keys[next(iter(keys))]
        while len(self) > self.MAX_ALL_KEYS:
            most = max(self._by_proc.values(), key=len)
            del most[next(iter(most))]

    def forget(self, tgids) -> None:
        for proc in [p for p in self._by_proc if p[0] in tgids]:
            del self._by_proc[proc]

    def __len__(self) -> int:
        return sum(len(k) for k in self._by_proc.values())


def mean_kernel_ns(rows) -> dict[int, float]:
    """Per process: GPU ns per launch over its recorded kernels (lost ones aside)."""
    acc: dict[int, list[int]] = {}
    for row in rows:
        if row.key[4] != C.KERNEL_DROPPED:
            a = acc.setdefault(row.key[0], [0, 0])
            a[0] += row.gpu_ns
            a[1] += row.launches
    return {pid: ns / n for pid, (ns, n) in acc.items() if n}
