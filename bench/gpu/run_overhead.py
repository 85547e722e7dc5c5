"""Interleaved A/B/C/D overhead runs on one GPU node; prints a table of medians.

Configs: baseline; shim injected, no agent; shim + `gpu-agent run` (defaults);
torch.profiler. Each (round, workload, config) is a fresh process.

Usage (root, on the GPU node): python3 bench/gpu/run_overhead.py [--rounds 3] [--steps 2000]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHIM = REPO / "build" / "libgpu_agent_shim.so"
CONFIGS = ["baseline", "empty-injection", "shim-no-agent", "shim+agent", "torch.profiler"]
# "empty-injection" is a control: a CUDA_INJECTION64_PATH library whose
# InitializeInjection does nothing. It separates what the driver's injection mode
# costs from what the shim itself costs.
EMPTY_INJECTION_C = "int InitializeInjection(void) { return 1; }\n"


def empty_injection() -> str:
    d = Path(tempfile.mkdtemp(prefix="gpu-agent-empty-"))
    (d / "empty.c").write_text(EMPTY_INJECTION_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libempty.so"), str(d / "empty.c")], check=True)
    return str(d / "libempty.so")


def one(workload, config, steps, empty_lib):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    if config.startswith("shim"):
        env["CUDA_INJECTION64_PATH"] = str(SHIM)
    elif config == "empty-injection":
        env["CUDA_INJECTION64_PATH"] = empty_lib
    out = subprocess.run([sys.executable, str(HERE / "overhead.py"), workload, "--config", config,
                          "--steps", str(steps)], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{workload}/{config} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["us_per_step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--workloads", default="eager,mlp,graph")
    ap.add_argument("--profiles", default=None, help="directory for the agent's profiles")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    a = ap.parse_args()
    workloads = a.workloads.split(",")
    configs = a.configs.split(",")
    empty_lib = empty_injection()
    res = {(w, c): [] for w in workloads for c in configs}
    prof_dir = a.profiles or tempfile.mkdtemp(prefix="gpu-agent-prof-")
    for r in range(a.rounds):
        for w in workloads:
            for c in configs:
                agent = None
                if c == "shim+agent":
                    agent = subprocess.Popen([sys.executable, "-m", "gpu_agent", "run", "--output-dir",
                                              prof_dir, "--interval", "5s"], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True)
                    seen = []
                    for line in agent.stderr:  # wait until every probe is attached
                        seen.append(line)
                        if "watching" in line:
                            break
                    else:
                        raise SystemExit("agent failed: " + "".join(seen))
                try:
                    res[(w, c)].append(one(w, c, a.steps, empty_lib))
                finally:
                    if agent:
                        agent.send_signal(signal.SIGTERM)
                        agent.wait(timeout=60)
                print(f"round {r} {w:6} {c:16} {res[(w, c)][-1]:8.2f} us/step", file=sys.stderr, flush=True)
    print("| per step, µs | " + " | ".join(workloads) + " |")
    print("|---|" + "---|" * len(workloads))
    for c in configs:
        cells = []
        for w in workloads:
            m, base = statistics.median(res[(w, c)]), statistics.median(res[(w, "baseline")])
            cells.append(f"{m:.1f}" + ("" if c == "baseline" else f" ({100 * (m / base - 1):+.1f} %)"))
        print(f"| {c} | " + " | ".join(cells) + " |")
    print(json.dumps({f"{w}|{c}": v for (w, c), v in res.items()}))


if __name__ == "__main__":
    main()
