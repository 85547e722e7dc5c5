"""What the agent costs a job, inside ONE process (python -m bench.gpu overhead
--method inprocess): the primary method of issue 29, possible once nothing
lingers after a teardown.

One process of a case (bench/gpu/cases.py --trace) times blocks of steps for the
whole run and tags each block with the shim's state at its end (attached or not,
teardowns so far). Meanwhile `gpu-agent run` starts at its defaults, watches for
--on seconds, and stops, --periods times, with --off seconds between. Per
attached period: its mean step time (from --settle seconds after the attach;
windows and their stalls included) against the mean of the detached blocks just
before and just after it; the table gives the median of those ratios with a bootstrap 95 % interval,
and the detached blocks after the first attach against those before it (what a
detach leaves behind). With --control-cpus a second process of the same case runs
beside it without the shim, its blocks split by the agent's own start and stop
times: what the host did meanwhile (these hosts drift by tens of percent).
With --shim-env GPU_AGENT_DEBUG=2 the shim prints each collection period's
estimate of its launches, and for a case with a fixed number of launches per step
(eager) each is set beside the job's own steps in that period: where an estimate
that reads low in `fidelity` loses its launches. The blocks inside count phases
are set beside those far from any window too: the count phase's own slowdown.
A workload of N processes (mlp-x4) runs N at once on one GPU, --cpus split among
them: each is analysed on its own, and the group's ratio per period is their mean.
"""

from __future__ import annotations

import bisect
import json
import statistics
import subprocess
import sys
import tempfile
import time

from bench.gpu.cases import STEPS
from bench.gpu.harness import Agent, clean_env, needs_bench_shim, shim_env
from bench.gpu import periods as period_lines
from bench.gpu.overhead import bootstrap_ci, cpu_groups

NEAR = 0.3  # s: a window, its count phase and the teardown after it lie within this of the teardown


def runs_of(trace: list[list]) -> list[tuple[int, list[list]]]:
    """Consecutive blocks of the same attached state: [(attached, blocks), ...]."""
    runs: list[tuple[int, list[list]]] = []
    for b in trace:
        if runs and runs[-1][0] == b[2]:
            runs[-1][1].append(b)
        else:
            runs.append((b[2], [b]))
    return runs


def rises(trace: list[list], col: int) -> list[int]:
    """Indices of the blocks at whose end a counter (3: teardowns, 4: windows opened)
    had gone up."""
    return [i for i in range(1, len(trace)) if len(trace[i]) > col and trace[i][col] > trace[i - 1][col]]


def count_phase_blocks(trace: list[list], opens: list[int], tds: list[float]) -> set[float]:
    """End times of the blocks wholly inside a count phase: the slot before each
    window, a window's length (its opening to its teardown, to a block's accuracy)."""
    lengths = []
    for i in opens:
        j = bisect.bisect_left(tds, trace[i][0])
        if j < len(tds) and tds[j] - trace[i - 1][0] < 2.0:
            lengths.append(tds[j] - trace[i][0])
    if not lengths:
        return set()
    w = statistics.median(lengths)
    out = set()
    for i in opens:
        lo, hi = trace[i][0] - w, trace[i - 1][0]  # the phase's latest start, the window's earliest opening
        for k in range(max(1, i - 200), i):
            if trace[k - 1][0] >= lo and trace[k][0] <= hi and trace[k][2]:
                out.add(trace[k][0])
    return out


def analyse(trace: list[list], settle: float) -> dict:
    """Per attached period: its mean step time (equal blocks: total time / steps,
    what a job's throughput pays, windows and their stalls included) against the
    mean of the detached runs just before and after it. The medians of blocks are
    kept beside (`block_medians`): they show the steady slowdown but hide a window
    that fills a few blocks of many. `between_windows`: the same ratio over the
    attached blocks more than NEAR s from any teardown (no CUPTI in the process)."""
    runs = runs_of(trace)
    ratios, med_ratios, detached_before, detached_after = [], [], [], []
    between = []  # attached blocks NEAR s or more from a teardown: between windows
    counting = []  # per period: blocks inside count phases against those far from any window
    count_us, quiet_us = [], []
    tds = [trace[i][0] for i in rises(trace, 3)]
    open_at = rises(trace, 4)
    count_blocks = count_phase_blocks(trace, open_at, tds)
    opens = [trace[i][0] for i in open_at]

    def away(t: float, marks=tds) -> bool:
        j = bisect.bisect_left(marks, t)
        return all(abs(t - marks[k]) > NEAR for k in (j - 1, j) if 0 <= k < len(marks))

    for i, (att, blocks) in enumerate(runs):
        if att:
            steady = [b[1] for b in blocks if b[0] >= blocks[0][0] + settle]
            around = [b[1] for j in (i - 1, i + 1) if 0 <= j < len(runs) and not runs[j][0] for b in runs[j][1]]
            if steady and around:
                ratios.append(statistics.fmean(steady) / statistics.fmean(around) - 1)
                med_ratios.append(statistics.median(steady) / statistics.median(around) - 1)
                far = [b[1] for b in blocks if b[0] >= blocks[0][0] + settle and away(b[0])]
                if far:
                    between.append(statistics.fmean(far) / statistics.fmean(around) - 1)
                t_lo = blocks[0][0] + settle
                cb = [b[1] for b in blocks if b[0] >= t_lo and b[0] in count_blocks]
                quiet = [b[1] for b in blocks if b[0] >= t_lo and away(b[0]) and away(b[0], opens)]
                if cb and quiet:
                    counting.append(statistics.fmean(cb) / statistics.fmean(quiet) - 1)
                    count_us.extend(cb)
                    quiet_us.extend(quiet)
        else:
            (detached_after if any(r[0] for r in runs[:i]) else detached_before).extend(b[1] for b in blocks)
    out = {
        "periods": len(ratios),
        "ratios": [round(r, 5) for r in ratios],
        "block_medians": [round(r, 5) for r in med_ratios],
        "teardowns": trace[-1][3] if trace else 0,
    }
    if ratios:
        out["median"] = statistics.median(ratios)
        out["ci"] = bootstrap_ci(ratios) if len(ratios) > 2 else None
        out["block_median"] = statistics.median(med_ratios)
    if between:
        out["between_windows"] = statistics.median(between)
    if counting:
        # step time in the count phases against between windows: what the count
        # phase's own slowdown is, as the workload sees it (budget.cpp's K_CB)
        out["count_phase"] = statistics.median(counting)
        out["count_phases"] = [round(r, 5) for r in counting]
        out["count_phase_us"] = statistics.fmean(count_us)  # µs per step, all periods' blocks
        out["between_us"] = statistics.fmean(quiet_us)
    if detached_before and detached_after:
        out["after_detach"] = statistics.median(detached_after) / statistics.median(detached_before) - 1
    return out


# Edges (s since the last window opened) of the phase profile's bins.
PHASE_EDGES = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 4.0)


def phase_profile(trace: list[list], settle: float) -> list[dict]:
    """Where in a period the attached blocks pay: each steady attached block's step
    time against the mean of the detached blocks around its period, binned by the
    time since the last window opened before the block's end. Per bin: blocks,
    their mean slowdown, and their share of all the attached periods' extra time
    (blocks hold equal steps, so a block's extra time is its µs over the detached
    mean). Blocks before a period's first window go to the bin "none"."""
    runs = runs_of(trace)
    opens = [trace[i][0] for i in rises(trace, 4)]
    bins: dict = {}
    for i, (att, blocks) in enumerate(runs):
        around = [b[1] for j in (i - 1, i + 1) if 0 <= j < len(runs) and not runs[j][0] for b in runs[j][1]]
        if not att or not around:
            continue
        base = statistics.fmean(around)
        for b in blocks:
            if b[0] < blocks[0][0] + settle:
                continue
            k = bisect.bisect_right(opens, b[0]) - 1
            since = b[0] - opens[k] if k >= 0 and opens[k] >= blocks[0][0] - 1 else None
            key = "none" if since is None else PHASE_EDGES[bisect.bisect_right(PHASE_EDGES, since) - 1]
            acc = bins.setdefault(key, [0, 0.0, 0.0])
            acc[0] += 1
            acc[1] += b[1] / base - 1
            acc[2] += b[1] - base
    total = sum(abs(v[2]) for v in bins.values()) or 1.0
    extra = sum(v[2] for v in bins.values())
    return [
        {"since_open_s": k, "blocks": n, "slowdown": s / n, "share_of_extra": x / (extra or total)}
        for k, (n, s, x) in sorted(bins.items(), key=lambda kv: (kv[0] == "none", kv[0] if kv[0] != "none" else 0))
    ]


def print_phase_profile(w: str, rows: list[dict]) -> None:
    print(f"    {w}: step time by time since the last window opened (attached against detached):", flush=True)
    for r in rows:
        k = r["since_open_s"]
        print(
            f"      {k if k == 'none' else f'>= {k:.2f} s':>10}: {r['blocks']:6d} blocks, "
            f"{100 * r['slowdown']:+7.2f} %, {100 * r['share_of_extra']:+6.1f} % of the extra time",
            flush=True,
        )


def together(per_process: list[dict]) -> dict:
    """N processes at once (mlp-x4), each analysed on its own: per attached period, the
    mean of the processes' ratios (the group's throughput, each process weighing the
    same), its median over the periods with a bootstrap 95 % interval, and each
    process's own median beside it."""
    k = min(len(p["ratios"]) for p in per_process)
    group = [statistics.fmean(p["ratios"][i] for p in per_process) for i in range(k)]
    out = {
        "processes": len(per_process),
        "ratios": [round(r, 5) for r in group],
        "per_process": [round(p["median"], 5) for p in per_process if "median" in p],
        "between_windows": [round(p["between_windows"], 5) for p in per_process if "between_windows" in p],
    }
    if group:
        out["median"] = statistics.median(group)
        out["ci"] = bootstrap_ci(group) if len(group) > 2 else None
    return out


def together_line(t: dict) -> str:
    ci = t.get("ci")
    return (
        f"attached vs detached {100 * t.get('median', float('nan')):+.2f} %"
        + (f" [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]" if ci else "")
        + f" over {len(t['ratios'])} periods; each process "
        + ", ".join(f"{100 * r:+.2f}" for r in t["per_process"])
        + " %; between windows "
        + ", ".join(f"{100 * r:+.2f}" for r in t["between_windows"])
        + " %"
    )


def start_case(w: str, steps: int, secs: float, env: dict, cpus: str) -> subprocess.Popen:
    pin = ["taskset", "-c", cpus] if cpus else []
    return subprocess.Popen(
        pin + [sys.executable, "-m", "bench.gpu.cases", w, "--steps", str(steps), "--trace", str(secs)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# Launches per step where a case's step is fixed (bench/gpu/cases.py): the shim's
# per-period estimates (GPU_AGENT_DEBUG=2) are checked against the job's own steps.
LAUNCHES_PER_STEP = {"eager": 20}


def trace_of(w: str, case: subprocess.Popen, secs: float, periods: list | None = None) -> list[list]:
    stdout, stderr = case.communicate(timeout=secs + 300)
    if case.returncode != 0:
        raise SystemExit(f"{w}: the case failed: {stderr[-2000:]}")
    if periods is not None:  # with GPU_AGENT_DEBUG=2: each period's line
        periods.extend(period_lines.parse(stderr))
    for ln in stderr.splitlines():  # with GPU_AGENT_DEBUG=1 in --shim-env: what the windows cost it
        if "gpu-agent-shim" in ln and any(f"{k} (" in ln for k in ("budget", "teardowns", "exit", "windows")):
            print(f"    {w}: {ln[ln.index('gpu-agent-shim') :][:700]}", flush=True)
    return json.loads(stdout.strip().splitlines()[-1])["trace"]


def inprocess(a) -> None:
    out = open(a.jsonl, "a")
    for w in a.workloads.split(","):
        base_w, _, nproc = w.partition("-x")  # mlp-x4: four processes of mlp at once, each analysed
        n = int(nproc or 1)
        steps = max(1, int(a.scale * STEPS[base_w]) // 40)
        settings = dict(kv.split("=", 1) for kv in filter(None, a.shim_env.split(",")))
        on_ms, off_ms = int(a.on * 1000), int(a.off * 1000)
        if a.toggle:  # one agent throughout; the shim acts detached in each cycle's OFF part
            settings["GPU_AGENT_EXP_TOGGLE_MS"] = f"{on_ms}:{off_ms}"
            secs = a.periods * (a.on + a.off) + a.off + 15
        else:
            secs = a.periods * (a.on + a.off + 11) + a.off + 10  # an agent takes about 10 s to start there
        env = shim_env(**settings)
        cases = [start_case(base_w, steps, secs, env, c) for c in cpu_groups(a.cpus, n)]
        if a.control_cpus:
            cases.append(start_case(base_w, steps, secs, clean_env(), a.control_cpus))
        for case in cases:  # built and warm: the traces start
            if not case.stdout.readline():
                raise SystemExit(f"{w}: the case failed: {case.stderr.read()[-2000:]}")
        time.sleep(a.off)
        watched = []
        if a.toggle:
            agent = Agent(tempfile.mkdtemp(prefix="gpu-agent-bench-"), cpus=a.agent_cpus, bench_shim=True)
            t_on = time.monotonic()
            time.sleep(a.periods * (a.on + a.off))
            agent.stop()
            t_off = time.monotonic()
            cycle = on_ms + off_ms
            k0, k1 = int(t_on * 1000) // cycle, int(t_off * 1000) // cycle + 1
            watched = [(max(t_on, k * cycle / 1000), min(t_off, (k * cycle + on_ms) / 1000)) for k in range(k0, k1)]
        for _ in range(0 if a.toggle else a.periods):
            agent = Agent(
                tempfile.mkdtemp(prefix="gpu-agent-bench-"), cpus=a.agent_cpus, bench_shim=needs_bench_shim(settings)
            )
            t_on = time.monotonic()
            time.sleep(a.on)
            agent.stop()
            watched.append((t_on, time.monotonic()))
            time.sleep(a.off)
        periods: list = []
        traces = [trace_of(w, c, secs, periods if i == 0 else None) for i, c in enumerate(cases[:n])]
        trace = traces[0]
        rec = {
            "method": "inprocess",
            "workload": w,
            "steps_per_block": steps,
            "on_s": a.on,
            "off_s": a.off,
            "toggle": a.toggle,
            "shim_env": a.shim_env,
            **analyse(trace, a.settle),
            "phases": phase_profile(trace, a.settle),
            "trace": trace,
        }
        print_phase_profile(w, rec["phases"])
        if periods and w in LAUNCHES_PER_STEP:
            rec.update(period_lines.against_steps(trace, periods, steps, LAUNCHES_PER_STEP[w]))
            print(
                f"    {w}: the shim's launches per period against the job's own steps: total "
                f"{100 * rec.get('period_error_total', float('nan')):+.2f} %, median "
                f"{100 * rec.get('period_error_median', float('nan')):+.2f} % over "
                f"{rec.get('periods_checked', 0)} periods",
                flush=True,
            )
        if n > 1:
            rec["together"] = together([analyse(t, a.settle) for t in traces])
            print(f"    {w}: {n} processes at once: {together_line(rec['together'])}", flush=True)
        if a.control_cpus:
            control = [
                [t, us, int(any(lo <= t < hi for lo, hi in watched)), 0] for t, us, *_ in trace_of(w, cases[n], secs)
            ]
            rec["control"] = {k: v for k, v in analyse(control, a.settle).items() if k != "teardowns"}
        out.write(json.dumps(rec) + "\n")
        out.flush()
        ci = rec.get("ci")
        print(
            f"inprocess {w:10} attached vs detached: "
            + (f"{100 * rec['median']:+.2f} %" if "median" in rec else "n/a")
            + (f" [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]" if ci else "")
            + f" over {rec['periods']} periods (block medians {100 * rec.get('block_median', float('nan')):+.2f} %"
            + f", between windows {100 * rec.get('between_windows', float('nan')):+.2f} %"
            + f", count phases against between windows {100 * rec.get('count_phase', float('nan')):+.2f} %: "
            + f"{rec.get('count_phase_us', float('nan')):.2f} against "
            + f"{rec.get('between_us', float('nan')):.2f} µs a step)"
            + "; detached after vs before the first attach: "
            + (f"{100 * rec['after_detach']:+.2f} %" if "after_detach" in rec else "n/a")
            + f"; {rec['teardowns']} teardowns"
            + (
                f"; control (no shim, same periods): {100 * rec['control'].get('median', float('nan')):+.2f} %, "
                f"after vs before {100 * rec['control'].get('after_detach', float('nan')):+.2f} %"
                if "control" in rec
                else ""
            ),
            flush=True,
        )
