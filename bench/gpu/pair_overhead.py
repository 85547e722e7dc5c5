"""The shim injected with no agent, against no shim: two processes at the same time.

Why: on the shared GPU node a CPU-launch-bound workload's per-step time moves by
+-15-25 % from one process to the next and drifts over seconds (docs/benchmarks-history.md
sections 7 and 8), so processes run one after the other cannot show a 1 % effect,
and the in-process A/B (ab_overhead.py) cannot unload the shim. Here each round
starts TWO processes of the same workload at the same moment, each pinned to its
own CPU: one with the shim injected (no agent anywhere, so it never attaches) and
one without. Both live through the same seconds of the node's drift, and the ratio
of their time averages is taken within the round. The two CPUs swap every round.
Each round also runs an A/A pair (neither injected): the method's own reading,
which should be 1.000. Both processes share the GPU, symmetrically.

Usage (root, GPU node, repo root, shim built, NO gpu-agent running):
  python3 bench/gpu/pair_overhead.py --workloads eager,mlp,compiled --rounds 8 --seconds 6
  python3 bench/gpu/pair_overhead.py --analyze /tmp/pairs.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ab_overhead import STEPS  # noqa: E402  (this directory: the same blocks as the A/B)
from run_overhead import SHIM, clean_env  # noqa: E402
POLLER = "ga-shim-poll"  # shim.cpp names its poller thread so
PAIRS = {"shim/none": ("shim", "none"), "none/none": ("none", "none")}


def agent_running() -> bool:
    """A gpu-agent anywhere on the node would raise the shim's semaphore and attach it."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # `gpu-agent ...`, `python3 [-m] gpu_agent ...` or `python3 .../gpu-agent ...`;
        # not a shell whose command string merely mentions it
        is_agent = (cmd[0].endswith(b"gpu-agent") or (len(cmd) > 1 and cmd[1].endswith(b"gpu-agent"))
                    or (len(cmd) > 2 and cmd[1] == b"-m" and cmd[2] == b"gpu_agent"))
        if is_agent and int(pid) != os.getpid():
            return True
    return False


def start(workload: str, side: str, cpu: int, seconds: float, overhead: str) -> subprocess.Popen:
    env = clean_env()
    if side == "shim":
        env["CUDA_INJECTION64_PATH"] = str(SHIM)
        env["GPU_AGENT_DEBUG"] = "1"  # an attach would be logged: checked below
    cmd = ["taskset", "-c", str(cpu), sys.executable, overhead, workload,
           "--steps", str(STEPS[workload]), "--seconds", str(seconds)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen, seconds: float) -> dict:
    out, err = p.communicate(timeout=seconds + 300)
    if p.returncode != 0:
        raise SystemExit(f"workload failed ({p.returncode}): {err[-2000:]}")
    if "attached (" in err:
        raise SystemExit("the shim attached: a gpu-agent is running on this node; stop it first")
    return json.loads(out.strip().splitlines()[-1])


def run_pair(workload: str, pair: str, cpus: tuple[int, int], seconds: float, overhead: str) -> dict:
    """One round of one pair: both processes at once; ratio = first / second."""
    sides = PAIRS[pair]
    procs = [start(workload, side, cpu, seconds, overhead) for side, cpu in zip(sides, cpus)]
    res = [finish(p, seconds) for p in procs]
    us = [float(r["us_per_step"]) for r in res]
    rec = {"workload": workload, "pair": pair, "cpus": list(cpus), "us": us, "ratio": us[0] / us[1],
           # the shim loads CUPTI only at attach; the app (PyTorch) may map it anyway
           "cupti_mapped": [r.get("libcupti_mapped") for r in res]}
    if sides[0] == "shim" and "thread_cpu_s" in res[0]:
        # The detached shim's only running code: its poller thread. Its CPU time
        # over the measured seconds bounds what it can take from the launching thread.
        rec["poller_cpu_s"] = res[0]["thread_cpu_s"].get(POLLER, 0.0)
        rec["measured_s"] = res[0]["measured_s"]
        if POLLER not in res[0]["thread_cpu_s"]:
            raise SystemExit(f"no {POLLER} thread in the injected process: was the shim loaded?")
    return rec


def summarize(records: list[dict]) -> list[dict]:
    rows: dict[tuple[str, str], list[float]] = {}
    for r in records:
        rows.setdefault((r["workload"], r["pair"]), []).append(r["ratio"])
    out = []
    for (w, pair), ratios in rows.items():
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        out.append({"workload": w, "pair": pair, "rounds": len(ratios),
                    "median": statistics.median(ratios), "q1": q[0], "q3": q[2],
                    "mean": statistics.mean(ratios)})
    return out


def table(records: list[dict]) -> str:
    lines = ["| workload | pair (first / second) | median ratio [quartiles] | mean | rounds "
             "| shim poller CPU, % of the measured time |",
             "|---|---|---|---|---|---|"]
    for r in summarize(records):
        # (wall_s: records from before measured_s, over the whole process)
        poll = [x["poller_cpu_s"] / x.get("measured_s", x.get("wall_s", 0)) for x in records
                if x["workload"] == r["workload"] and x["pair"] == r["pair"] and "poller_cpu_s" in x]
        lines.append(f"| {r['workload']} | {r['pair']} | {100 * (r['median'] - 1):+.2f} % "
                     f"[{100 * (r['q1'] - 1):+.2f}, {100 * (r['q3'] - 1):+.2f}] | "
                     f"{100 * (r['mean'] - 1):+.2f} % | {r['rounds']} | "
                     + (f"{100 * max(poll):.4f} % (max)" if poll else "") + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="eager,mlp,compiled")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=6.0, help="per process, after its warm-up")
    ap.add_argument("--cpus", default="2,3", help="the two CPUs, swapped every round")
    ap.add_argument("--out", default="/tmp/gpu-agent-pairs.jsonl", help="JSON lines, appended to")
    ap.add_argument("--analyze", metavar="FILE", help="only print the table of FILE")
    ap.add_argument("--overhead", default=str(HERE / "overhead.py"),
                    help="the workload script (a stand-in prints the same JSON: a dry run off the GPU)")
    a = ap.parse_args()
    if a.analyze:
        print(table([json.loads(ln) for ln in open(a.analyze) if ln.strip()]))
        return
    if agent_running():
        raise SystemExit("a gpu-agent is running on this node: the injected shim would attach; stop it first")
    c0, c1 = (int(c) for c in a.cpus.split(","))
    records = []
    with open(a.out, "a") as out:
        for i in range(a.rounds):
            cpus = (c0, c1) if i % 2 == 0 else (c1, c0)
            for w in a.workloads.split(","):
                for pair in PAIRS:
                    rec = run_pair(w, pair, cpus, a.seconds, a.overhead)
                    records.append(rec)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    print(f"round {i} {w:9} {pair:10} cpus {cpus}: {rec['us'][0]:.1f} / {rec['us'][1]:.1f} µs "
                          f"= {100 * (rec['ratio'] - 1):+.2f} %", file=sys.stderr, flush=True)
    print(table(records))


if __name__ == "__main__":
    main()
