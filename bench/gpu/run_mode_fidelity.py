"""The duty-cycled estimate under `gpu-agent run` (the daemon), against exact counts.

Why: the fidelity runs (device_issue3.sh weights) use `gpu-agent record`. The
in-process A/B runs, which use `gpu-agent run`, showed eager MLP's shim counting
fewer in-window launches than kernel records (27-71 %), while `record` runs of
the same workload count them exactly (docs/benchmarks-history.md sections 10 and 11).
This runs each case under a fresh `gpu-agent run` with its default settings,
stops it, sums the kernel launches of every profile it wrote, and compares them
with the truth:
  plain : overhead.py W --steps S, attached throughout: exact launches are known
          (S/4 + 5 S steps, PER[W] kernels each);
  ab    : overhead.py W --ab SECONDS with the shim toggling (400 ms attached in
          every 1.6 s, as ab_overhead.py): the truth is the launches the shim's
          callbacks counted while attached, less those after its last window.
It prints the shim's exit lines too.

Usage (root, GPU node, repo root, shim built, no other gpu-agent running):
  python3 bench/gpu/run_mode_fidelity.py [--workloads mlp,eager] [--steps 5000] [--ab 20]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from agent_proc import start_agent  # noqa: E402  (bench/agent_proc.py)
from ab_overhead import STEPS  # noqa: E402
from run_overhead import SHIM, clean_env  # noqa: E402
from window_fidelity import profile_kernels  # noqa: E402

PER = {"eager": 20, "mlp": 12}  # kernels per step (overhead.py)
EXIT = re.compile(r"exit \(pid \d+\): (\d+) launches collected, (\d+) kernel records, .*?"
                  r"(\d+) launches seen while attached, (\d+) after the last window")


def run_case(workload: str, args: list[str], toggle: bool) -> tuple[int, str]:
    """Estimated launches over every profile of one agent run, and the shim's exit line."""
    out_dir = tempfile.mkdtemp(prefix="gpu-agent-runmode-")
    agent = start_agent(out_dir, "5s")
    env = clean_env()
    env.update(CUDA_INJECTION64_PATH=str(SHIM), GPU_AGENT_DEBUG="1")
    if toggle:
        env["GPU_AGENT_EXP_TOGGLE_MS"] = "400:1200"
    try:
        p = subprocess.run([sys.executable, str(HERE / "overhead.py"), workload, *args],
                           env=env, capture_output=True, text=True, timeout=900)
    finally:
        agent.send_signal(signal.SIGTERM)  # the last interval's profile is written at exit
        agent.wait(timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"{workload} failed: {p.stderr[-2000:]}")
    lines = [ln for ln in p.stderr.splitlines() if "exit (" in ln or "unseen" in ln]
    total = 0
    for f in sorted(Path(out_dir).glob("*.pb.gz")):
        total += sum(n for _, n in profile_kernels(f).values())
    return total, "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="mlp,eager")
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--ab", type=float, default=20.0, help="seconds of the toggled case (0: skip it)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the agent loads eBPF programs")
    for w in a.workloads.split(","):
        est, log = run_case(w, ["--steps", str(a.steps)], toggle=False)
        truth = PER[w] * (a.steps // 4 + 5 * a.steps)
        print(log)
        print(f"{w} plain: {est} launches estimated vs {truth} exact: {100 * (est / truth - 1):+.2f} %",
              flush=True)
        if not a.ab:
            continue
        est, log = run_case(w, ["--steps", str(STEPS[w]), "--ab", str(a.ab), "--toggle", "0.4:1.2"],
                            toggle=True)
        m = EXIT.search(log)
        print(log)
        if not m:
            print(f"{w} ab: no exit line from the shim")
            continue
        collected, records, seen, after = (int(x) for x in m.groups())
        truth = seen - after
        print(f"{w} ab: {est} launches estimated vs {truth} counted while attached (before the last "
              f"window's end): {100 * (est / truth - 1):+.2f} %; in-window launches / records "
              f"{collected} / {records}", flush=True)


if __name__ == "__main__":
    main()
