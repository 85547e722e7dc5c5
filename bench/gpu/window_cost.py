"""Where a profiled process's throughput cost sits against the shim's collection windows:
python -m bench.gpu.window_cost FILE.jsonl ... [--skip S] [--post S]

Reads the records of `python -m bench.gpu overhead --method side --trace-seconds S`
(bench/gpu/overhead.py): per round a baseline process and a profiled one ("agent" or
another config) ran side by side, each timing blocks of steps (bench/gpu/cases.py
--trace: [time.monotonic() at the block's end, µs per step, attached, teardowns so far,
windows opened so far]; a block lasts µs x steps, its steps read off the trace's end
times). Blocks count as overhead.py's finish() counts them: those that end from the
process's ready + --skip s (its --wait) on.

A window's phases (shim/src/collection.cpp, window.cpp, tail.cpp, teardown.cpp):
  count        [S, O)       the launch callbacks alone, the slot before the window
  window       [O, C)       callbacks and kernel activity, C = O + W
  tail         [C, T)       kernel activity alone for half a slot; then the teardown,
                            on the job's thread at its next launch, at T
  td..+0.1     [T, T+0.1)   CUPTI down until the poller (100 ms) subscribes it again
  +0.1..+post  [T+0.1, T+post)
O: the shim's "window opened at X s (CLOCK_MONOTONIC)" lines. At GPU_AGENT_DEBUG=2 each
period's line (window.cpp's ga_window_extrapolated, parsed by bench/gpu/periods.py) gives
the rest: W (its window time), S = O - (callbacks on - W) (the count phase is the rest of
the callbacks' time), T = C + its tail (the counter's block where the tail ran past the
period's end, into the next). S and T may come a few ms early: the callbacks' time also
holds the forced flush after the tail, which the teardown follows. Without those lines
(GPU_AGENT_DEBUG=1) all is reconstructed at block resolution: T = the middle of the block
in which the trace's teardown counter steps up, W = (T - O) / 1.5 (a tail is half a
window) within [0.1, 1] s (the median W where no teardown followed), S = O - W.

Excess: each profiled block's time less the baseline partner's mean block (over the
blocks finish() kept), spread evenly over the block. Over the whole span it sums to N x
mean_baseline x (mean_profiled / mean_baseline - 1), finish()'s throughput ratio, so its
parts add up. The steady level L is the excess per second from T + post to the next
window's count phase (in brackets: the baseline against its own mean there, a control);
a phase's window-locked excess is its excess less L x its length. Only windows whose
phases lie inside the span count. The budget's estimate per window is the plan's cost
model (shim/src/budget.cpp's ga_budget_plan, with tails) at each window's W, with the
terms of the shim's exit line (its running means at exit; no line carries a period's
plan): fixed + 1.5 x W x s + W x cb, s = slow + cb x (1 - slow).
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import statistics
from pathlib import Path

from bench.gpu.periods import parse as period_lines

OPENED = re.compile(r"window opened at ([\d.]+) s \(CLOCK_MONOTONIC\)")
RESUB_S = 0.1  # the poller's interval: CUPTI subscribed again at its next poll after a teardown
EPS_S = 0.002  # "window opened" lines carry ms
PHASES = ("count", "window", "tail", "td..+0.1", "+0.1..+post")


def blocks_of(rec: dict) -> list[tuple[float, float, float, int]]:
    """(start, end, seconds, teardowns so far) per block; steps = block spacing / µs per step."""
    tr = rec["trace"]
    steps = max(1, round(statistics.median((b[0] - a[0]) / (b[1] * 1e-6) for a, b in zip(tr, tr[1:]))))
    return [(t - us * steps / 1e6, t, us * steps / 1e6, td) for t, us, _, td, *_ in tr]


def excess_fn(blocks: list, ref: float):
    """excess(lo, hi): the blocks' time less ref each, spread over each block, within [lo, hi)."""
    ends = [b[1] for b in blocks]

    def excess(lo: float, hi: float) -> float:
        out, i = 0.0, bisect.bisect_right(ends, lo)
        while i < len(blocks) and blocks[i][0] < hi:
            s, e, d, _ = blocks[i]
            out += (d - ref) * max(0.0, min(hi, e) - max(lo, s)) / d
            i += 1
        return out

    return excess


def reconstructed(opens: list[float], blocks: list) -> list[dict]:
    """Each window at block resolution, from its opening and the trace's teardown counter."""
    tds = [(b[0] + b[1]) / 2 for a, b in zip(blocks, blocks[1:]) for _ in range(b[3] - a[3])]
    wins = []
    for k, o in enumerate(opens):
        nxt = opens[k + 1] if k + 1 < len(opens) else float("inf")
        i = bisect.bisect_left(tds, o)
        t = tds[i] if i < len(tds) and tds[i] < min(nxt, o + 2.0) else None
        wins.append({"O": o, "T": t, "W": min(1.0, max(0.1, (t - o) / 1.5)) if t else None, "exact": False})
    wm = statistics.median([w["W"] for w in wins if w["W"]] or [0.1])
    for w in wins:
        w["W"] = w["W"] or wm
        w["T"] = w["T"] or w["O"] + 1.5 * w["W"]
        w["C"], w["S"], w["T_blocks"] = w["O"] + w["W"], w["O"] - w["W"], w["T"]
    return wins


def apply_periods(wins: list[dict], periods: list[dict]) -> None:
    """Where a period line holds the window's opening: its W, count phase and tail, exact."""
    ends = [p["end"] for p in periods]
    for w in wins:
        i = bisect.bisect_left(ends, w["O"])
        if i == len(periods) or periods[i]["win_ms"] <= 0:
            continue
        p = periods[i]
        start = p["end"] - p["len_ms"] / 1e3
        if w["O"] < start - EPS_S:
            continue
        w["W"], w["exact"] = p["win_ms"] / 1e3, True
        w["C"] = w["O"] + w["W"]
        count = (p["on_ms"] - p["win_ms"]) / 1e3
        # a count phase that began in the period before shows only from this one's start
        w["S"] = w["O"] - count if w["O"] - count > start + EPS_S else w["O"] - w["W"]
        tail_end = w["C"] + p["tail_ms"] / 1e3
        w["T"] = tail_end if tail_end < p["end"] - EPS_S else max(tail_end, w["T_blocks"])


def budget_terms(lines: list[str]) -> tuple[float, float, float] | None:
    """(fixed s, slowdown in windows, count phase's) from the shim's exit budget line."""
    line = next((ln for ln in lines if "budget (pid" in ln), "")
    got = [re.search(p, line) for p in (r"fixed ([\d.]+) ms", r"in windows ([\d.]+) %", r"count phase ([\d.]+) %")]
    if not all(got):
        return None
    return float(got[0][1]) / 1e3, float(got[1][1]) / 100, float(got[2][1]) / 100


def estimate(terms: tuple[float, float, float], w: float) -> float:
    fixed, slow, cb = terms
    s = slow + cb * (1 - slow)
    return fixed + 1.5 * w * s + w * cb


def analyze(base: dict, prof: dict, skip: float, post: float) -> dict:
    """One pair: window-locked excess by phase, L, the budget's estimate, the throughput split."""
    a_all = blocks_of(prof)
    a = [b for b in a_all if b[1] >= prof["ready"] + skip]
    b = [x for x in blocks_of(base) if x[1] >= base["ready"] + skip]
    ref = statistics.fmean(x[2] for x in b)
    ex_a, ex_b = excess_fn(a, ref), excess_fn(b, ref)
    lines = prof.get("shim_lines", [])
    wins = reconstructed([float(m[1]) for m in map(OPENED.search, lines) if m], a_all)
    apply_periods(wins, period_lines("\n".join(lines)))
    t0, t1 = a[0][0], a[-1][1]
    ex, du, used = [0.0] * len(PHASES), [0.0] * len(PHASES), []
    la = lb = lt = 0.0
    for k, w in enumerate(wins):
        nxt = wins[k + 1]["S"] if k + 1 < len(wins) else t1
        lo, hi = max(w["T"] + post, t0), min(nxt, t1)
        if hi > lo:
            la, lb, lt = la + ex_a(lo, hi), lb + ex_b(lo, hi), lt + hi - lo
        if w["S"] < t0 or w["T"] + post > t1:
            continue
        used.append(w)
        spans = [(w["S"], w["O"]), (w["O"], w["C"]), (w["C"], w["T"]), (w["T"], w["T"] + RESUB_S)]
        for i, (lo, hi) in enumerate(spans + [(w["T"] + RESUB_S, w["T"] + post)]):
            hi = min(hi, nxt)
            if hi > lo:
                ex[i], du[i] = ex[i] + ex_a(lo, hi), du[i] + hi - lo
    n, level = max(len(used), 1), la / lt if lt else 0.0
    locked = [(ex[i] - level * du[i]) / n for i in range(len(PHASES))]
    terms = budget_terms(lines)
    exact = [w for w in used if w["exact"]]
    blk = statistics.median(x[2] for x in a)
    return {
        "windows": len(used),
        "exact": len(exact),
        "t_agree": sum(abs(w["T"] - w["T_blocks"]) <= blk for w in exact),
        "W": statistics.fmean(w["W"] for w in used) if used else float("nan"),
        "locked": locked,
        "est": statistics.fmean(estimate(terms, w["W"]) for w in used) if terms and used else None,
        "L": level,
        "Lb": lb / lt if lt else 0.0,
        "L_s": lt,
        "total": statistics.fmean(x[1] for x in prof["trace"] if x[0] >= prof["ready"] + skip)
        / statistics.fmean(x[1] for x in base["trace"] if x[0] >= base["ready"] + skip)
        - 1,
        "locked_frac": sum(locked) * len(used) / (len(a) * ref),
        # the host's steal of each process's CPUs over its kept blocks (bench/gpu/steal.py)
        "steal": (prof.get("steal_pct"), base.get("steal_pct")),
    }


def pairs(paths: list[str]) -> dict[str, list[tuple[str, dict, dict]]]:
    """ "workload (config)" -> [(label, baseline record, profiled record)], side traces
    only: each config apart, so that one without windows adds no zeros to another's."""
    out: dict[str, list] = {}
    for i, path in enumerate(paths, 1):
        by: dict = {}
        for r in map(json.loads, Path(path).read_text().splitlines()):
            if r.get("method") == "side" and "trace" in r:
                by.setdefault((r["workload"], r["round"]), {})[r["config"]] = r
        for (w, rnd), d in by.items():
            prof = [c for c in d if c != "baseline"]
            if "baseline" in d and prof:
                out.setdefault(f"{w} ({prof[0]})", []).append((f"{i}:{rnd}", d["baseline"], d[prof[0]]))
    return out


def row(label: str, r: dict) -> str:
    src = f"periods {r['exact']}/{r['windows']}, T {r['t_agree']}" if r["exact"] else "blocks"
    est = f"{1e3 * r['est']:.1f}" if r["est"] is not None else "-"
    rest = r["total"] - r["locked_frac"]
    return (
        f"| {label} | {r['windows']} ({src}) | {1e3 * r['W']:.0f} | "
        + " | ".join(f"{1e3 * v:+.1f}" for v in r["locked"])
        + f" | {1e3 * sum(r['locked']):+.1f} | {est} | {100 * r['L']:+.1f} [{100 * r['Lb']:+.1f}] ({r['L_s']:.0f} s)"
        + f" | {100 * r['total']:+.2f} = {100 * r['locked_frac']:+.2f} + {100 * rest:+.2f} | "
        + " / ".join("-" if v is None else f"{v:.1f}" for v in r["steal"])
        + " |"
    )


def summary(w: str, rs: list[dict]) -> str:
    med = lambda f: statistics.median(f(r) for r in rs)
    total, lf, level = med(lambda r: r["total"]), med(lambda r: r["locked_frac"]), med(lambda r: r["L"])
    ms, ests = med(lambda r: sum(r["locked"])), [r["est"] for r in rs if r["est"] is not None]
    top = max(range(len(PHASES)), key=lambda i: statistics.median(r["locked"][i] for r in rs))
    n_ex, n_all = sum(r["exact"] for r in rs), sum(r["windows"] for r in rs)
    how = (
        f"from the period lines for {n_ex} of {n_all} windows"
        if n_ex
        else "reconstructed at block resolution (no period lines: GPU_AGENT_DEBUG below 2)"
    )
    return (
        f"{w}: {len(rs)} pairs, throughput cost median {100 * total:+.1f} % "
        f"({min(100 * r['total'] for r in rs):+.1f} to {max(100 * r['total'] for r in rs):+.1f}). "
        f"Window-locked excess, median {1e3 * ms:+.1f} ms a window (largest phase: {PHASES[top]})"
        + (f" against the budget's {1e3 * statistics.median(ests):.1f} ms" if ests else "")
        + f", is {100 * lf:+.2f} % of the time; the rest, {100 * (total - lf):+.2f} % (medians of pairs), "
        f"goes with the steady level between windows, L median {100 * level:+.1f} % "
        f"(baseline control {100 * med(lambda r: r['Lb']):+.1f} %). Window times {how}."
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="side.jsonl files of overhead --method side --trace-seconds")
    ap.add_argument("--skip", type=float, default=10.0, help="blocks from ready + SKIP s (overhead's --wait)")
    ap.add_argument("--post", type=float, default=0.35, help="the steady level from teardown + POST s")
    a = ap.parse_args(argv)
    print("files: " + ", ".join(f"{i} = {p}" for i, p in enumerate(a.files, 1)))
    print(f"ms per window, window-locked (excess less L x length); skip {a.skip} s, post {a.post} s")
    print("source: blocks (reconstructed), or periods n/m (period lines) and T k: of those, T within a block of the")
    print("trace's teardown counter (a check)")
    head = ["pair", "windows (source)", "W ms", *PHASES, "locked", "budget est", "L % [base] (span)"]
    for w, ps in pairs(a.files).items():
        rs = [analyze(b, p, a.skip, a.post) for _, b, p in ps]
        print(f"\n{w}\n| " + " | ".join(head + ["throughput % = locked + rest", "steal % (profiled / base)"]) + " |")
        print("|" + "---|" * (len(head) + 2))
        for (label, _, _), r in zip(ps, rs):
            print(row(label, r))
        print("\n" + summary(w, rs))


if __name__ == "__main__":
    main()
