"""The GPU benchmark: python -m bench.gpu overhead|fidelity|intervals|smoke|fault|table [options].

Run as root on a GPU node, from the repository root, with the shim built
(`make shim`) and the agent's Python dependencies importable (docs/benchmarks.md
says how, the device script bench/gpu/device.sh does it on a node without a
package registry).

  overhead  the job's own step time with and without the agent, separate
            processes, steady state (bench/gpu/overhead.py)
  fidelity  the agent's GPU time, launches and stack shares against truth
            (bench/gpu/fidelity.py)
  intervals every interval's profile of `gpu-agent run` against the job's own step
            log: per-interval error, per kernel and stack; phased, bursty, short
            and stop/start jobs (bench/gpu/intervals.py)
  smoke     one `gpu-agent record` of a short eager + graph run (it starts at once
            and ends within seconds: the agent must read its Python frames while it
            runs); fails when the profile has no kernel GPU time, or less than 99 %
            of it under named Python frames
  fault     the teardown's fault run: 1 000 window cycles beside 4 launching threads
            and a graph thread, processes exiting mid-window, the agent restarted
            10 times (bench/gpu/fault_run.py)
  globaltimer  %globaltimer against CUPTI's kernel times, and a .nanotrace merged
            into a real capture (bench/gpu/globaltimer.py)
  rateproxy what tracks a job's launch rate between count phases: its thread's CPU
            time, instructions, cycles (bench/gpu/rate_proxy.py)
  windowcost  where a side-by-side run's throughput cost sits against the shim's
            windows, from its JSONL (bench/gpu/window_cost.py; its own options)
  subcost   what CUPTI's subscription between windows costs a job's launches, in
            one process without the shim (bench/gpu/subscription_cost.py; its own options)
  table     the overhead table of a JSONL file written before
Results go, as JSON lines, to --jsonl (appended).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gpu import (
    fault_run,
    fidelity,
    globaltimer,
    inprocess,
    intervals,
    overhead,
    rate_proxy,
    subscription_cost,
    window_cost,
)
from bench.gpu.cases import STEPS, WORKLOADS
from bench.gpu.harness import case_command, clean_env, profile_kernels, profile_stacks, python_share


def smoke(a) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ok = True
        for w in a.workloads.split(","):
            prof = Path(tmp) / f"{w}.pb.gz"
            tl = []
            if a.timeline:
                Path(a.timeline).mkdir(parents=True, exist_ok=True)
                tl = ["--trace", f"{a.timeline}/{w}.perfetto-trace", "--events", f"{a.timeline}/{w}.ndjson"]
            t0 = time.time_ns()
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpu_agent",
                    "record",
                    "-o",
                    str(prof),
                    *tl,
                    "--",
                    *case_command(w, steps=max(1, STEPS[w] // 8), repeats=1, wait=0),
                ],
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            t1 = time.time_ns()
            status = [ln for ln in p.stderr.splitlines() if ln.startswith("gpu-agent: ")]
            if p.returncode != 0 or not prof.exists():
                print(f"{w}: FAILED\n{p.stderr[-2000:]}")
                ok = False
                continue
            kernels = profile_kernels(prof)
            gpu_ns = sum(v[0] for v in kernels.values())
            py = python_share(prof)
            good = gpu_ns > 0 and (py > 0.99 or w == "driver-graph")
            ok &= good
            print(
                f"{w}: {'ok' if good else 'FAILED'}: {len(kernels)} kernels, "
                f"{sum(v[1] for v in kernels.values())} launches, {gpu_ns / 1e6:.1f} ms GPU, "
                f"{py:.1%} of it under Python frames; {status[-1] if status else ''}"
            )
            if a.timeline and p.returncode == 0:
                good &= timeline_check(w, Path(f"{a.timeline}/{w}.ndjson"), kernels, t0, t1)
                ok &= good
            if not good:  # the heaviest stack, to say what is missing
                frames, values = max(profile_stacks(prof), key=lambda fv: fv[1][0])
                print("    heaviest stack: " + " <- ".join(frames[:16]))
        if not ok:
            raise SystemExit(1)


def timeline_check(w: str, path: Path, kernels: dict, t0: int, t1: int) -> bool:
    """record --events against the same run's profile: every kernel once, on the
    wall clock, with the devices' identity and the stacks it should have."""
    import json

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    head, ks = lines[0], [x for x in lines if x["type"] == "kernel"]
    launches = sum(v[1] for v in kernels.values())
    on_clock = sum(t0 <= k["start_ns"] <= k["end_ns"] <= t1 for k in ks)
    graph = [k for k in ks if k.get("graph_id")]
    eager = [k for k in ks if not k.get("graph_id")]
    good = (
        len(ks) == launches
        and on_clock == len(ks)
        and head["clock"] == "CLOCK_REALTIME"
        and all(d["uuid"].startswith("GPU-") for d in head["devices"])
        and head["devices"]
        and all(k.get("stack_id") for k in graph)
    )
    print(
        f"  timeline {w}: {'ok' if good else 'FAILED'}: {len(ks)} kernel events for {launches} "
        f"launches in the profile, {on_clock} inside the run's wall-clock span, devices "
        f"{[(d['uuid'], d['model']) for d in head['devices']]}, {len(graph)} graph kernels "
        f"({sum(bool(k.get('stack_id')) for k in graph)} with a capture stack, "
        f"{sum(bool(k.get('replay_stack_id')) for k in graph)} with a replay site), "
        f"{len(eager)} other kernels ({sum(bool(k.get('stack_id')) for k in eager)} with a sampled "
        f"launch stack, {sum(bool(k.get('launch_ns')) for k in eager)} with a flow), "
        f"{sum(x['type'] == 'callstack_def' for x in lines)} distinct stacks, "
        f"{path.stat().st_size / 1e6:.1f} MB; drops {[x for x in lines if x['type'] == 'drop']}"
    )
    return good


def first_line(module) -> str:
    """A module's first docstring line, as argparse help (which formats % itself)."""
    return module.__doc__.split("\n")[0].replace("%", "%%")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["windowcost"]:  # an analysis of records written before: its own options
        return window_cost.main(argv[1:])
    if argv[:1] == ["subcost"]:  # CUPTI through ctypes in one process: its own options
        return subscription_cost.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("overhead", help=first_line(overhead))
    o.add_argument(
        "--method", choices=["sep", "pair", "side", "timeline", "residual", "events", "inprocess"], default="sep"
    )
    o.add_argument("--periods", type=int, default=6, help="--method inprocess: attach/detach periods")
    o.add_argument("--on", type=float, default=10.0, help="--method inprocess: seconds the agent watches")
    o.add_argument("--off", type=float, default=6.0, help="--method inprocess: seconds without agent")
    o.add_argument(
        "--toggle",
        action="store_true",
        help="--method inprocess: one agent throughout; the shim (benchmark build) acts detached "
        "for --off s of every --on + --off (GPU_AGENT_EXP_TOGGLE_MS)",
    )
    o.add_argument("--settle", type=float, default=1.0, help="--method inprocess: attached blocks skipped (s)")
    o.add_argument("--shim-env", default="", help="--method inprocess: shim settings, K=V,K=V")
    o.add_argument("--control-cpus", default="", help="--method inprocess: a process without the shim here")
    o.add_argument("--seconds", type=float, default=40.0, help="--method timeline: the loop's length")
    o.add_argument(
        "--trace-seconds", type=float, default=0.0, help="--method side: each process times blocks this long"
    )
    o.add_argument(
        "--swap-s",
        type=float,
        default=0.0,
        help="--method side: the pair's processes trade CPUs every this many seconds "
        "(0: each keeps its half), so that a CPU's slow stretches fall on both",
    )
    o.add_argument(
        "--gpus",
        default="",
        help="--method side: two GPU ordinals (e.g. 0,1): each process of a pair on its own, "
        "which on which drawn at random (default: both on the one GPU)",
    )
    o.add_argument("--rounds", type=int, default=6)
    o.add_argument("--workloads", default="eager,mlp,graph,compiled,driver-graph,mlp-x4")
    o.add_argument(
        "--configs", default="baseline,shim,agent", help=f"comma-separated, from: {', '.join(overhead.CONFIGS)}"
    )
    o.add_argument("--wait", type=float, default=3.0, help="seconds before timing (steady state)")
    o.add_argument("--repeats", type=int, default=5, help="timed blocks per process (median)")
    o.add_argument("--scale", type=float, default=1.0, help="times the steps per block (2.4 s at 1)")
    o.add_argument("--cpus", default="", help="pin the case processes here (e.g. 2-5)")
    o.add_argument("--agent-cpus", default="", help="pin the agent here (e.g. 8-11)")
    o.add_argument(
        "--agent-settle", type=float, default=5.0, help="seconds between the agent watching and the first case"
    )
    o.add_argument("--tag", default="", help="prefix of this invocation's round names")
    o.add_argument("--verbose", action="store_true", help="print the agent's last lines at its stop")
    f = sub.add_parser("fidelity", help=first_line(fidelity))
    f.add_argument("--workloads", default="graph,driver-graph,mlp,eager,compiled,mlp-x4")
    f.add_argument("--steps", type=int, default=0, help="steps per run (default: per case)")
    f.add_argument(
        "--run-seconds",
        type=float,
        default=0,
        help="steps for about this long a run (from the 2.4 s blocks of bench/gpu/cases.py)",
    )
    f.add_argument("--run", action="store_true", help="also under `gpu-agent run` (defaults)")
    f.add_argument("--record-runs", type=int, default=2, help="windowed `record` runs per case")
    f.add_argument("--budget", default="2", help="windowed runs: the cost budget, percent (run's default)")
    f.add_argument("--duty", type=int, default=0, help="windowed runs: one window in N instead of the budget")
    f.add_argument(
        "--continuous-runs",
        type=int,
        default=2,
        choices=[1, 2],
        help="continuous runs per case (2: their spread is the truth's noise)",
    )
    f.add_argument("--audit", action="store_true", help="truth from the same run's full trace")
    f.add_argument("--shares", action="store_true", help="per-stack shares of the sites case")
    f.add_argument("--intervals", action="store_true", help="per-interval spread under `run`")
    f.add_argument(
        "--flood",
        action="store_true",
        help="CUPTI short of buffers: recorded + [dropped: cupti] launches = launches made",
    )
    f.add_argument("--seconds", type=float, default=40.0, help="--intervals: how long")
    f.add_argument(
        "--debug", action="store_true", help="the shim's exit lines too, and its period lines set beside the loop"
    )
    f.add_argument("--keep", default="", metavar="DIR", help="copy the runs' profiles here")
    f.add_argument(
        "--shim-env",
        default="",
        metavar="K=V,K=V",
        help="windowed runs: shim settings (an experiment's GPU_AGENT_EXP_* takes the benchmark build)",
    )
    iv = sub.add_parser("intervals", help=first_line(intervals))
    iv.add_argument("--workloads", default="eager,mlp", help=f"jobs, from: {', '.join(intervals.JOBS)}")
    iv.add_argument("--seconds", type=float, default=70.0, help="each case's loop (s); the sum ends there")
    iv.add_argument("--interval", type=float, default=10.0, help="the agent's --interval (s)")
    iv.add_argument("--skip", type=float, default=10.0, help="judge intervals from this second of the process on")
    iv.add_argument("--exact-seconds", type=float, default=5.0, help="the continuous run's loop (s)")
    iv.add_argument("--floor", action="store_true", help="each job again with GPU_AGENT_DUTY_CYCLE=1")
    iv.add_argument("--metrics", action="store_true", help="the agent serves /metrics too: scraped every 5 s")
    iv.add_argument(
        "--periods", action="store_true", help="the shim's period lines against the step log, and pooled rates"
    )
    iv.add_argument("--verbose", action="store_true", help="print the agent's last lines at its stop")
    iv.add_argument("--keep", default="", metavar="DIR", help="work in DIR, keeping profiles and step logs")
    iv.add_argument(
        "--shim-env", default="", help="shim settings of every case process, K=V,K=V (GPU_AGENT_OVERHEAD_BUDGET=1)"
    )
    s = sub.add_parser("smoke", help="one short `gpu-agent record` per case")
    s.add_argument("--workloads", default="eager,graph,driver-graph")
    s.add_argument(
        "--timeline",
        default="",
        metavar="DIR",
        help="also record --trace/--events into DIR and check them against the profile",
    )
    fr = sub.add_parser("fault", help=first_line(fault_run))
    fr.add_argument("out", help="directory for its profiles, stderr and fault.jsonl")
    fr.add_argument("--cycles", type=int, default=1000, help="teardowns before the graph thread starts")
    g = sub.add_parser("globaltimer", help=first_line(globaltimer))
    g.add_argument("--launches", type=int, default=200, help="launches of the stamping kernel")
    g.add_argument(
        "--gap-seconds",
        type=int,
        default=0,
        help="the second half of the launches this long after the first (the clocks' drift)",
    )
    g.add_argument("--burst", type=int, default=1, help="launches back to back between synchronizations")
    g.add_argument("--standalone", type=int, default=8, help="launches also written each as a standalone file (spread)")
    g.add_argument("--keep", default="", help="keep the stamps and the capture here (placement read again offline)")
    g.add_argument(
        "--from",
        dest="from_dir",
        default="",
        help="read the stamps and capture a --keep wrote instead of running (no GPU): the merges again",
    )
    rp = sub.add_parser("rateproxy", help=first_line(rate_proxy))
    rp.add_argument("--workloads", default="eager,mlp,llama")
    rp.add_argument("--seconds", type=float, default=45.0, help="each process's loop")
    rp.add_argument("--agent", action="store_true", help="each again with the shim, under `gpu-agent run`")
    sub.add_parser("windowcost", help=first_line(window_cost), add_help=False)  # main() hands it its argv
    sub.add_parser("subcost", help=first_line(subscription_cost), add_help=False)
    t = sub.add_parser("table", help="print the overhead table of --jsonl")
    for p in (o, f, g, t, iv, rp):
        p.add_argument("--jsonl", default="bench-gpu.jsonl", help="results, appended")
    a = ap.parse_args(argv)
    known = intervals.JOBS if a.cmd == "intervals" else WORKLOADS
    for w in filter(None, getattr(a, "workloads", "").split(",")):
        if w not in known:
            ap.error(f"unknown workload {w!r}; known: {', '.join(known)}")
    if a.cmd == "overhead" and a.method == "inprocess":
        inprocess.inprocess(a)
    elif a.cmd == "overhead" and a.method == "timeline":
        overhead.timeline(a)
    elif a.cmd == "overhead" and a.method == "residual":
        overhead.residual(a)
    elif a.cmd == "overhead" and a.method == "events":
        overhead.events(a)
    elif a.cmd == "overhead":
        overhead.run(a)
        overhead.print_table(a.jsonl)
    elif a.cmd == "fidelity":
        fidelity.run(a)
    elif a.cmd == "intervals":
        intervals.run(a)
    elif a.cmd == "smoke":
        smoke(a)
    elif a.cmd == "fault":
        sys.exit(fault_run.main([a.out, str(a.cycles)]))
    elif a.cmd == "rateproxy":
        rate_proxy.bench(a)
    elif a.cmd == "globaltimer":
        globaltimer.run(a)
    else:
        overhead.print_table(a.jsonl)


if __name__ == "__main__":
    main()
