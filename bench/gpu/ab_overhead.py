"""In-process A/B overhead: one process per (workload, config), states alternating.

Why: on the shared GPU node the per-step time of a CPU-launch-bound workload moves
by +-15-25 % from one process to the next (docs/benchmarks-history.md section 7), more than
the few percent being measured, so ratios of separate processes cannot resolve it.
Here ONE process runs for --seconds and its state alternates: on for ON seconds,
then off for OFF seconds (--toggle ON:OFF, default 0.4:1.2):

  floor           no shim; the "states" are only the time phase: the noise floor
                  of this very method (its ratio should be 1.000).
  torch.profiler  no shim; torch.profiler (CPU + CUDA) started and stopped by the
                  workload itself.
  shim+agent...   the shim injected, `gpu-agent run` (defaults) up for the whole
                  run, and GPU_AGENT_EXP_TOGGLE_MS=ON:OFF making the shim attach
                  for ON and detach for OFF: attached against detached (= shim
                  injected, no agent) in the same process, the same minutes.

The workload (overhead.py --ab) labels each block with the state at its start and
end; mixed blocks are dropped. Only the last part of each "off" slot is kept: its
first --settle-off seconds (default 0.8) are dropped, so that any slowdown a window
leaves behind counts against the agent, not against the detached side; "on" slots
are kept whole (attach work included). The machine's speed wanders by +-15 % over
seconds, so the slots are short and each "on" slot is compared with the mean of
its two neighbouring "off" slots; the figure is the median of those per-cycle
ratios, with their quartiles, and the pooled ratio of all on-blocks to all
off-blocks.

A workload "W-xK" (e.g. mlp-x4) runs K processes of W at once on the one GPU;
they toggle in step, and the table's row pools the cycles of all K.

Usage (root, GPU node, repo root, shim built):
  python3 bench/gpu/ab_overhead.py --workloads eager,mlp,mlp-x4 --seconds 30 --out /tmp/ab.jsonl
  python3 bench/gpu/ab_overhead.py --analyze /tmp/ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from agent_proc import start_agent  # noqa: E402  (bench/agent_proc.py)
from run_overhead import SHIM, clean_env  # noqa: E402  (this directory)

# Shim settings of each config (all shim configs also toggle attachment).
CONFIGS = {
    "floor": None,
    "torch.profiler": None,
    "shim+agent": {},                                               # the defaults
    "shim+agent-callbacks-only": {"GPU_AGENT_DUTY_CYCLE": "100000"},  # attached, no window opens
    "shim+agent-cb-windowed": {"GPU_AGENT_EXP_CALLBACKS": "windowed"},
    # Runtime-domain launch callbacks as well as the driver's (the default before
    # docs/benchmarks-history.md section 10):
    "shim+agent-cb-runtime": {"GPU_AGENT_EXP_CALLBACKS": "runtime"},
    "shim+agent-callbacks-only-runtime": {"GPU_AGENT_DUTY_CYCLE": "100000",
                                          "GPU_AGENT_EXP_CALLBACKS": "runtime"},
    "shim+agent-continuous": {"GPU_AGENT_DUTY_CYCLE": "1"},
    "shim+agent-n20": {"GPU_AGENT_DUTY_CYCLE": "20"},                # windows half as often
}
STEPS = {"eager": 100, "mlp": 100, "graph": 500, "compiled": 50}
# "W-xK": K processes of workload W at once, sharing the GPU. They toggle in step
# (the shim's phase is CLOCK_MONOTONIC), and each labels its own blocks.
SHARED = re.compile(r"^(\w+)-x(\d+)$")


def run_workload(workload: str, config: str, seconds: float, toggle: str) -> list[dict]:
    """One record per process: one, or K for a "W-xK" workload."""
    m = SHARED.match(workload)
    if not m:
        return [run_one(workload, config, seconds, toggle)]
    base, k = m.group(1), int(m.group(2))
    procs = [start_one(base, config, seconds, toggle) for _ in range(k)]
    recs = [finish_one(p, base, config, seconds) for p in procs]
    for i, rec in enumerate(recs):
        rec["workload"], rec["process"] = workload, i
    return recs


def run_one(workload: str, config: str, seconds: float, toggle: str) -> dict:
    return finish_one(start_one(workload, config, seconds, toggle), workload, config, seconds)


def start_one(workload: str, config: str, seconds: float, toggle: str) -> subprocess.Popen:
    env = clean_env()
    shim_env = CONFIGS[config]
    if shim_env is not None:
        env.update(shim_env)
        env["CUDA_INJECTION64_PATH"] = str(SHIM)
        env["GPU_AGENT_EXP_TOGGLE_MS"] = ":".join(str(round(float(x) * 1000)) for x in toggle.split(":"))
        env["GPU_AGENT_DEBUG"] = "1"
    cmd = [sys.executable, str(HERE / "overhead.py"), workload, "--config", config,
           "--steps", str(STEPS[workload]), "--ab", str(seconds), "--toggle", toggle]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_one(p: subprocess.Popen, workload: str, config: str, seconds: float) -> dict:
    try:
        stdout, stderr = p.communicate(timeout=seconds + 300)
    except subprocess.TimeoutExpired:
        p.kill()
        raise SystemExit(f"{workload}/{config} did not finish in {seconds + 300:.0f} s")
    if p.returncode != 0:
        raise SystemExit(f"{workload}/{config} failed: {stderr[-3000:]}")
    rec = json.loads(stdout.strip().splitlines()[-1])
    rec["shim_log"] = [ln for ln in stderr.splitlines()
                       if re.search(r"exit \(|windows \(|disabled|failed", ln)][-6:]
    return rec


def segments(blocks, settle: dict):
    """[(state, [us...])] for runs of unmixed blocks, minus each run's first settle[state] s."""
    segs, cur, start = [], None, 0.0
    for t, us, s0, s1 in blocks:
        if s0 != s1:
            cur = None  # a switch happened inside this block
            continue
        if cur is None or cur[0] != s0:
            cur = (s0, [])
            segs.append(cur)
            start = t
        if t - start >= settle.get(s0, 0.0):
            cur[1].append(us)
    return [(s, v) for s, v in segs if v]


def analyze(rec: dict, settle: dict) -> dict:
    segs = segments(rec["blocks"], settle)
    ratios = []
    for i, (s, v) in enumerate(segs):
        if s != 1:
            continue
        offs = [statistics.mean(segs[j][1]) for j in (i - 1, i + 1)
                if 0 <= j < len(segs) and segs[j][0] == 0]
        if offs:
            ratios.append(statistics.mean(v) / statistics.mean(offs))
    on = [us for s, v in segs if s == 1 for us in v]
    off = [us for s, v in segs if s == 0 for us in v]
    out = {"workload": rec["workload"], "config": rec["config"], "cycles": len(ratios),
           "ratios": ratios, "on": on, "off": off}
    return summarize(out)


def summarize(out: dict) -> dict:
    """Median and quartiles of the per-cycle ratios, and the pooled ratio."""
    ratios, on, off = out["ratios"], out["on"], out["off"]
    if len(ratios) >= 1 and on and off:
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        out.update(median=statistics.median(ratios), q1=q[0], q3=q[2],
                   pooled=statistics.mean(on) / statistics.mean(off),
                   on_us=statistics.mean(on), off_us=statistics.mean(off))
    return out


def table(path: str, settle: dict) -> None:
    rows = []
    for line in open(path):
        if not line.strip():
            continue
        r = analyze(json.loads(line), settle)
        prev = rows[-1] if rows else None
        # The K processes of one shared run make one row: all their cycles together.
        if (SHARED.match(r["workload"]) and prev and prev["workload"] == r["workload"]
                and prev["config"] == r["config"] and prev["procs"] < int(SHARED.match(r["workload"]).group(2))):
            merged = {k: prev[k] + r[k] for k in ("ratios", "on", "off")}
            merged.update(workload=r["workload"], config=r["config"], cycles=len(merged["ratios"]),
                          procs=prev["procs"] + 1)
            rows[-1] = summarize(merged)
            continue
        r["procs"] = 1
        rows.append(r)
    print("| workload | config | off µs/step | on µs/step | on/off, median of cycles [quartiles] | pooled | cycles |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "median" not in r:
            print(f"| {r['workload']} | {r['config']} | n/a | n/a | too few cycles | | {r['cycles']} |")
            continue
        print(f"| {r['workload']} | {r['config']} | {r['off_us']:.1f} | {r['on_us']:.1f} | "
              f"{100 * (r['median'] - 1):+.2f} % [{100 * (r['q1'] - 1):+.2f}, {100 * (r['q3'] - 1):+.2f}] | "
              f"{100 * (r['pooled'] - 1):+.2f} % | {r['cycles']} |")
    for line in open(path):
        rec = json.loads(line)
        for ln in rec.get("shim_log", []):
            print(f"{rec['workload']}/{rec['config']}: {ln}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="eager,mlp")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seconds", type=float, default=30.0, help="per process")
    ap.add_argument("--toggle", default="0.4:1.2", metavar="ON:OFF", help="seconds on, then off")
    ap.add_argument("--settle-off", type=float, default=0.8,
                    help="seconds dropped at the start of each off slot")
    ap.add_argument("--out", default="/tmp/gpu-agent-ab.jsonl", help="JSON lines, appended to")
    ap.add_argument("--analyze", metavar="FILE", help="only print the table of FILE")
    a = ap.parse_args()
    settle = {0: a.settle_off}
    if a.analyze:
        return table(a.analyze, settle)
    configs = a.configs.split(",")
    agent = None
    if any(CONFIGS[c] is not None for c in configs):
        agent = start_agent(tempfile.mkdtemp(prefix="gpu-agent-ab-"), "10s")
    try:
        with open(a.out, "a") as out:
            for w in a.workloads.split(","):
                for c in configs:
                    for rec in run_workload(w, c, a.seconds, a.toggle):
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        r = analyze(rec, settle)
                        print(f"{w:9} {c:28} " + (f"{100 * (r['median'] - 1):+6.2f} % "
                              f"[{100 * (r['q1'] - 1):+.2f}, {100 * (r['q3'] - 1):+.2f}] n={r['cycles']}"
                              if "median" in r else "too few cycles"), file=sys.stderr, flush=True)
    finally:
        if agent:
            if agent.poll() is not None:
                print(f"agent exited early ({agent.returncode}):", "".join(agent.log_tail), file=sys.stderr)
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=60)
            print("agent's last lines:", "".join(list(agent.log_tail)[-5:]), file=sys.stderr)
    table(a.out, settle)


if __name__ == "__main__":
    main()
