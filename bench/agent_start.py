"""How long `gpu-agent record` takes around a command that does nothing: the eBPF
set-up before the command starts and the tear-down after it ends (docs/benchmarks.md,
"Agent start").

Runs `gpu-agent record -o OUT -- true` --rounds times and prints the median wall time
and CPU time (user and system, the agent's children included), then one round's
phases from the agent's own code: building the BPF programs (clang, in bcc), loading
and attaching them (the kernel's verifier), and detaching.

Usage: .venv/bin/python bench/agent_start.py [--rounds 7] [--agent-dir agent] [--bpf-dir bpf]
(--agent-dir/--bpf-dir: another checkout's, for a before/after on one machine)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PHASES = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from gpu_agent.probes import preflight
bcc = preflight.import_bcc()
from gpu_agent.join.collector import Collector
compiled = {}
class Timed(bcc.BPF):
    def __init__(self, *a, **kw):
        t = time.perf_counter(); super().__init__(*a, **kw); compiled["s"] = time.perf_counter() - t
bcc.BPF = Timed
c = Collector(sys.argv[2])
t0 = time.perf_counter(); c.open(); t1 = time.perf_counter(); c.close(); t2 = time.perf_counter()
print(f"compile {compiled['s']:.2f} s, load and attach {t1 - t0 - compiled['s']:.2f} s, detach {t2 - t1:.2f} s")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--agent-dir", type=Path, default=REPO / "agent")
    ap.add_argument("--bpf-dir", type=Path, default=REPO / "bpf")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(args.agent_dir), GPU_AGENT_BPF_DIR=str(args.bpf_dir))
    py = str(REPO / ".venv" / "bin" / "python")
    shim = str(REPO / "build" / "libgpu_agent_shim.so")
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(
                [py, "-m", "gpu_agent", "record", "-q", "-o", f"{tmp}/p.pb.gz", "--shim", shim, "--", "true"],
                env=env,
                check=True,
                capture_output=True,
            )
            walls.append(time.perf_counter() - t)
            ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(ru2.ru_utime - ru.ru_utime + ru2.ru_stime - ru.ru_stime)
    phases = subprocess.run(
        [py, "-c", PHASES, str(args.agent_dir), shim], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"record -- true: median {statistics.median(walls):.2f} s (min {min(walls):.2f}, max {max(walls):.2f}, "
        f"{args.rounds} rounds), CPU median {statistics.median(cpus):.2f} s; one round's phases: {phases}"
    )


if __name__ == "__main__":
    sys.exit(main())
