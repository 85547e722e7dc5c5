"""A version 4 file's clocks: its events' times on the session's reference clock."""

from __future__ import annotations

from .model import MAX_CLOCK_HOPS, Nanotrace, NanotraceError


def to_reference(t: Nanotrace, clock: int, ts: int) -> float:
    """A timestamp of `clock` on the session's reference clock, following the
    snapshots' edges (interpolated between a pair's snapshots, extrapolated past
    them along the nearest pair, by the source clock's frequency with only one)."""
    for _ in range(MAX_CLOCK_HOPS):
        if clock == t.reference_clock:
            return ts
        snaps = sorted((s for s in t.snapshots if s[0] == clock), key=lambda s: s[2])
        if not snaps:
            raise NanotraceError(f"clock {clock} has no snapshot toward the reference clock {t.reference_clock}")
        ref = snaps[0][1]
        snaps = [s for s in snaps if s[1] == ref]
        if len(snaps) == 1:
            f_src = t.clocks.get(clock, (0, 0, 0, 0))[3] or 1_000_000_000
            f_ref = t.clocks.get(ref, (0, 0, 0, 0))[3] or 1_000_000_000
            ts = snaps[0][3] + (ts - snaps[0][2]) * f_ref / f_src
        else:
            k = next((i for i in range(1, len(snaps) - 1) if ts < snaps[i][2]), len(snaps) - 1)
            a, b = snaps[k - 1], snaps[k]
            ts = a[3] + (ts - a[2]) * (b[3] - a[3]) / ((b[2] - a[2]) or 1)
        clock = ref
    raise NanotraceError(f"no path of at most {MAX_CLOCK_HOPS} snapshots to the reference clock")


