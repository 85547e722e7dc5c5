"""The shim's collection periods against the job's own launches.

With GPU_AGENT_DEBUG=2 the shim prints one line per period whose window opened
(shim/src/window.cpp): when it ended, how long it was, what its launch callbacks
saw, the time it extrapolated and at which rates, and its estimate. These
helpers set each period beside the launches the job really made in it:
  against_steps    the in-process method's blocks of steps (bench/gpu/inprocess.py)
  against_uniform  a fidelity run's steady loop (bench/gpu/fidelity.py): its
                   launches spread evenly over the loop's span, which the case
                   prints (cases.py's "monotonic_s")
"""

from __future__ import annotations

import re
import statistics

PERIOD = re.compile(
    r"period \(pid \d+\): ended at ([\d.]+) s \(CLOCK_MONOTONIC\) after ([\d.]+) ms; "
    r"callbacks on ([\d.]+) ms, (\d+) launches seen \((\d+) in the window of ([\d.]+) ms\); "
    r"teardown ([\d.]+) ms; tail ([\d.]+) ms at (\d+)/s; (?:busy [\d.]+ ms of [\d.]+ ms[^;]*; )?"
    r"(?:hook (\d+) hits at (-?[\d.]+)[^;]*; )?"
    r"rest ([\d.]+) ms at (\d+)/s "
    r"\(count phase (-?\d+)/s\); (\d+) launches(?: \(clocks (\d+)\))?$"
)
KEYS = ("end", "len_ms", "on_ms", "seen", "in", "win_ms", "td_ms", "tail_ms", "tail_rate", "hook_hits", "hook_ratio")
KEYS += ("rest_ms", "rate")
KEYS += ("count_rate", "est", "clocks")
JOINED = re.compile(r"(\d+) launches joined to the window before them")
# a period whose launch counter grew: its stretches' launches, counted at a later
# calibration (shim/src/window.cpp's waits), for the period that ended at that time
MORE = re.compile(r"period \(pid \d+\): (\d+) launches more for the period that ended at ([\d.]+) s")


def parse(stderr: str) -> list[dict]:
    """Every period line: end (s), len_ms, on_ms (callbacks on), seen, in (the window's),
    win_ms, td_ms (teardown stalls), tail_ms, tail_rate, rest_ms, rate (per s, what the
    rest went at), count_rate, est (launches, with those counted for it later: more)."""
    more: dict[float, int] = {}
    for m in MORE.finditer(stderr):
        more[round(float(m[2]), 6)] = more.get(round(float(m[2]), 6), 0) + int(m[1])
    rows = [
        dict(zip(KEYS, (None if g is None else float(g) if "." in g else int(g) for g in m.groups())))
        for m in map(PERIOD.search, stderr.splitlines())
        if m
    ]
    for r in rows:
        r["more"] = more.get(round(r["end"], 6), 0)
        r["est"] += r["more"]
    return rows


def joined(stderr: str) -> int:
    """Launches of partial periods whose window never opened (the exit line)."""
    return sum(int(m.group(1)) for m in JOINED.finditer(stderr))


def overlap(lo: float, hi: float, a: float, b: float) -> float:
    return max(0.0, min(hi, b) - max(lo, a))


def against_steps(trace: list[list], periods: list[dict], steps: int, per_step: int) -> dict:
    """Each period's estimate against the job's own: its steps in the period
    (blocks of `steps` steps, prorated where a block straddles an edge)."""
    blocks = [(t - steps * us / 1e6, t) for t, us, *_ in trace]
    errs, est_sum, true_sum = [], 0, 0.0
    for p in periods:
        lo = p["end"] - p["len_ms"] / 1e3
        true = per_step * steps * sum(overlap(lo, p["end"], a, b) / (b - a) for a, b in blocks if b > a)
        if true > 0:
            errs.append(p["est"] / true - 1)
            est_sum += p["est"]
            true_sum += true
    if not errs:
        return {}
    return {
        "periods_checked": len(errs),
        "period_error_median": statistics.median(errs),
        "period_error_total": est_sum / true_sum - 1,
    }


def against_uniform(periods: list[dict], span: tuple[float, float], launches: int, joined_n: int = 0) -> dict:
    """A steady loop's `launches` spread evenly over `span` (monotonic s): where the
    estimate's error lies, at the loop's edges or all along it. Interior periods
    lie wholly inside the loop, at least 1 s from either end."""
    t0, t1 = span
    rate = launches / (t1 - t0)
    rows = []
    for p in periods:
        lo = p["end"] - p["len_ms"] / 1e3
        rows.append(dict(p, lo=lo, true=rate * overlap(lo, p["end"], t0, t1)))
    if not rows:
        return {}
    inner = [r for r in rows if r["lo"] >= t0 + 1 and r["end"] <= t1 - 1]
    outer = [r for r in rows if r not in inner]
    est_all, true_all = sum(r["est"] for r in rows), sum(r["true"] for r in rows)
    out = {
        "true_rate": rate,
        "periods": len(rows),
        "estimate_sum": est_all,
        "joined": joined_n,
        "first_period_from_loop_start_s": rows[0]["lo"] - t0,
        "loop_end_to_last_period_s": t1 - rows[-1]["end"],
        "uncovered_launches": launches - true_all,
        "inner_periods": len(inner),
        "edge_err_launches": sum(r["est"] - r["true"] for r in outer),
        "edges": [row(r) for r in outer],
        "rows": [row(r) for r in rows],
    }
    if inner:
        out.update(
            inner_err_pct=100 * (sum(r["est"] for r in inner) / sum(r["true"] for r in inner) - 1),
            inner_period_err_median_pct=100 * statistics.median(r["est"] / r["true"] - 1 for r in inner),
            inner_rate_vs_true_pct=100 * (statistics.median(r["rate"] for r in inner) / rate - 1),
            inner_count_rate_vs_true_pct=100 * (statistics.median(r["count_rate"] for r in inner) / rate - 1),
        )
    return out


def row(r: dict) -> dict:
    return {
        k: round(r[k], 4) if isinstance(r[k], float) else r[k]
        for k in ("lo", "end", "len_ms", "on_ms", "seen", "rest_ms", "rate", "count_rate", "est", "true")
    }


def report(name: str, res: dict, launches: int) -> None:
    """Print what against_uniform found, in launches and in % of the run's."""
    if not res:
        print(f"    {name}: no period lines (GPU_AGENT_DEBUG=2)", flush=True)
        return
    pct = 100 / max(1, launches)
    print(
        f"    {name}: {res['periods']} periods; the loop at {res['true_rate']:.0f} launches/s; first period "
        f"{res['first_period_from_loop_start_s']:+.3f} s from the loop's start, the loop ended "
        f"{res['loop_end_to_last_period_s']:+.3f} s after the last; launches outside every period "
        f"{res['uncovered_launches']:.0f} ({res['uncovered_launches'] * pct:.2f} %), joined {res['joined']}",
        flush=True,
    )
    if res["inner_periods"]:
        print(
            f"      {res['inner_periods']} inner periods: estimate {res['inner_err_pct']:+.2f} % (median period "
            f"{res['inner_period_err_median_pct']:+.2f} %); the rest's rate {res['inner_rate_vs_true_pct']:+.2f} "
            f"%, the count phase's {res['inner_count_rate_vs_true_pct']:+.2f} % against the loop's",
            flush=True,
        )
    print(
        f"      edge periods {res['edge_err_launches']:+.0f} launches ({res['edge_err_launches'] * pct:+.2f} %)",
        flush=True,
    )
    for e in res["edges"]:
        print(
            f"        edge period {e['lo']:.3f}-{e['end']:.3f} s: {e['len_ms']:.0f} ms, seen {e['seen']}, rest "
            f"{e['rest_ms']:.0f} ms at {e['rate']}/s (count phase {e['count_rate']}/s): {e['est']} against "
            f"{e['true']:.0f}",
            flush=True,
        )


def launches_at(p: dict, rate: float) -> float:
    """A period's launches were its rest to go at `rate` (per s): what its callbacks saw,
    the rest at that rate, the tails at theirs (window.cpp's ga_window_extrapolated)."""
    return p["seen"] + rate * p["rest_ms"] / 1e3 + p["tail_rate"] * p["tail_ms"] / 1e3


NEAR = 0.25  # a neighbour's rate within 25 % of a period's own is the same job's


def alternatives(rows: list[dict]) -> dict[str, list[float]]:
    """Each period's launches (rows in time order) by ways of setting its rest's rate:
    shipped  the line's estimate (the launch counter's where it stands)
    clocks   the count phase's rate alone, on the busy or the wall clock (the line's
             "clocks": the estimate without the launch counter, GPU_AGENT_LAUNCH_COUNTER=0)
    near3    the mean of its own and its two neighbours' rates, those within NEAR of its own
    near5    the same over two neighbours each side
    run      the mean rate of all periods: how far pooling could go on a steady job"""
    rates = [p["rate"] for p in rows]

    def near(i: int, k: int) -> float:
        own = rates[i]
        got = [r for r in rates[max(0, i - k) : i + k + 1] if own and abs(r / own - 1) <= NEAR]
        return sum(got) / len(got) if got else own

    mean = sum(rates) / len(rates) if rates else 0.0
    return {
        "shipped": [float(p["est"]) for p in rows],
        "clocks": [float(p["clocks"] if p.get("clocks") is not None else p["est"]) for p in rows],
        "near3": [launches_at(p, near(i, 1)) for i, p in enumerate(rows)],
        "near5": [launches_at(p, near(i, 2)) for i, p in enumerate(rows)],
        "run": [launches_at(p, mean) for p in rows],
    }
