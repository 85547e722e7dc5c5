"""The teardown's fault run on a GPU (python -m bench.gpu fault OUT_DIR).

Pass means no crash, no hang, and no record lost inside a window; every record a
teardown raced away is counted and shown. Under a running `gpu-agent run`:
  cycles    one PyTorch process, 4 threads launching eagerly (each on its own
            stream), windows forced close together (GPU_AGENT_WINDOW_MS=5,
            GPU_AGENT_DUTY_CYCLE=3, a test-only pace) until --cycles teardowns; then
            a fifth thread captures a torch graph and replays it (cudaGraphLaunch,
            which the driver's cuGraphLaunch callback sees) for 15 s while the 4 go
            on: from its next period the process stays subscribed (CUDA graphs), and
            windows go on. (Its lost count is a floor: graph records outnumber
            their launches.)
  compiled  a torch.compile process (bench/gpu/cases.py compiled: Triton's modules
            loaded) for 30 s of steps, windows as in cycles.
  exits     20 processes that exit after a random 50-600 ms of launching, windows
            every 40 ms: most exit inside or around a window.
  restarts  `gpu-agent run` stopped and started 10 times against a live process
            (first: the phase a cut-off run is least likely to reach otherwise).
Each process's exit lines (GPU_AGENT_DEBUG) give the counts: launches in windows,
their kernel records, records of launches no window saw (the edges), teardowns.
Lost inside windows = launches in windows - (records - records of unseen launches).
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.gpu.harness import Agent, shim_env

FAST = {"GPU_AGENT_WINDOW_MS": "5", "GPU_AGENT_DUTY_CYCLE": "3", "GPU_AGENT_DEBUG": "1"}
EXIT = re.compile(
    r"exit \(pid (\d+)\): (\d+) launches collected, (\d+) kernel records \((\d+) lost by CUPTI\), "
    r"(\d+) windows.*?, (\d+) records of unseen launches"
)
TEARDOWNS = re.compile(
    r"teardowns \(pid \d+\): (\d+), finalize mean ([\d.]+) max ([\d.]+) ms, (\d+) waited "
    r"for callbacks in CUPTI, (\d+) CUPTI calls skipped, (\d+) failed or put off"
)


def worker(argv: list[str]) -> None:
    """In the GPU process: 4 eager threads; after --graph-after teardowns a graph thread."""
    import torch
    from bench.gpu.cases import ShimState

    seconds, graph_after = float(argv[0]), int(argv[1])
    torch.zeros(1, device="cuda")  # CUDA, and with it the shim, loaded
    shim = ShimState()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ends like a job: threads joined, exit lines
    steps = [0] * 5

    def eager(i: int) -> None:
        s = torch.cuda.Stream()
        x = torch.zeros(1024, device="cuda")
        with torch.cuda.stream(s):
            while not stop.is_set():
                for _ in range(20):
                    x.add_(1.0)
                s.synchronize()
                steps[i] += 1

    def graphs() -> None:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = torch.zeros(1024, device="cuda")
            for _ in range(3):
                x.mul_(1.0001)
            g = torch.cuda.CUDAGraph()
            # thread-local capture: the eager threads' syncs go on meanwhile (global
            # mode refused them: "operation not permitted when stream is capturing")
            with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
                for _ in range(10):
                    x.mul_(1.0001)
            while not stop.is_set():
                g.replay()
                s.synchronize()
                steps[4] += 1

    threads = [threading.Thread(target=eager, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    t0, graph, t_graph = time.monotonic(), None, 0.0
    while not stop.is_set() and time.monotonic() - t0 < seconds and not (graph and time.monotonic() - t_graph > 15):
        time.sleep(0.05)
        if graph is None and graph_after and shim.now()[1] >= graph_after:
            graph, t_graph = threading.Thread(target=graphs), time.monotonic()
            graph.start()
            print(f"worker: graph thread from {t_graph - t0:.1f} s", file=sys.stderr, flush=True)
    stop.set()
    for t in threads + ([graph] if graph else []):
        t.join()
    print(f"worker: steps {steps}", file=sys.stderr, flush=True)


def launch(seconds: float, graph_after: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.gpu.fault_run", "--worker", str(seconds), str(graph_after)],
        env=shim_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def tally(name: str, stderr: str, rc: int) -> dict:
    row = {"phase": name, "rc": rc, "crash_or_hang": rc != 0}
    m = EXIT.search(stderr)
    if m:
        launches, records, cupti_lost, windows, unseen = map(int, m.groups()[1:])
        row.update(
            launches_in_windows=launches,
            records=records,
            cupti_lost=cupti_lost,
            windows=windows,
            unseen_records=unseen,
            lost_in_windows=max(0, launches - (records - unseen)),
        )
    t = TEARDOWNS.search(stderr)
    if t:
        row.update(
            teardowns=int(t.group(1)),
            finalize_mean_ms=float(t.group(2)),
            finalize_max_ms=float(t.group(3)),
            gate_waits=int(t.group(4)),
            gate_skipped=int(t.group(5)),
            teardowns_failed=int(t.group(6)),
        )
    row["lines"] = [
        ln[ln.index("gpu-agent-shim") :][:300]
        for ln in stderr.splitlines()
        if "gpu-agent-shim" in ln
        and ("exit" in ln or "teardowns" in ln or "CUPTI" in ln or "graphs" in ln or "windows (" in ln)
    ][:8]
    print(json.dumps({k: v for k, v in row.items() if k != "lines"}), flush=True)
    for ln in row["lines"]:
        print("   ", ln, flush=True)
    return row


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        worker(argv[1:])
        return 0
    out = Path(argv[0])
    cycles = int(argv[1]) if len(argv) > 1 else 1000
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    def done(name: str, p: subprocess.Popen, timeout: float, **extra) -> str:
        """Its stderr once it ends (killed past timeout: a hang), tallied and kept."""
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            err += f"\nHUNG: killed after {timeout:g} s"
        if "attaches" in extra:  # the attaches the process saw
            extra["attaches"] = err.count("attached (pid")
        rows.append(dict(tally(name, err, p.returncode), **extra))
        with open(out / "fault.jsonl", "a") as f:  # as it goes: a run cut off keeps its rows
            f.write(json.dumps(rows[-1]) + "\n")
        return err

    print("== restarts: `gpu-agent run` stopped and started 10 times against a live process", flush=True)
    p = launch(600, 0, {"GPU_AGENT_WINDOW_MS": "20", "GPU_AGENT_DUTY_CYCLE": "3", "GPU_AGENT_DEBUG": "1"})
    for i in range(10):
        a = Agent(str(out / f"restart-{i}"), "--interval", "1s")
        time.sleep(2.0)
        a.stop()
        if p.poll() is not None:
            break
    p.terminate()  # SIGTERM: the worker stops its threads and exits normally (the shim's exit lines)
    done("restarts", p, 60, attaches=0)
    print(f"    restarts: {rows[-1]['attaches']} attaches seen by the process", flush=True)

    agent = Agent(str(out / "profiles"), "--interval", "5s")
    try:
        print(f"== cycles: 4 eager threads until {cycles} teardowns, then a graph thread too", flush=True)
        err = done("cycles", launch(240, cycles, FAST), 420)
        (out / "cycles.stderr").write_text(err)
        print("== compiled: a torch.compile process, windows 5 ms in 15 ms for 30 s", flush=True)
        done(
            "compiled",
            subprocess.Popen(
                [sys.executable, "-m", "bench.gpu.cases", "compiled", "--trace", "30"],
                env=shim_env(**FAST),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            ),
            300,
        )
        print("== exits: 20 processes exit at a random point, windows every 40 ms", flush=True)
        rng = random.Random(29)
        for i in range(20):
            done(
                f"exit #{i + 1}",
                launch(
                    rng.uniform(0.05, 0.6),
                    0,
                    {"GPU_AGENT_WINDOW_MS": "20", "GPU_AGENT_DUTY_CYCLE": "2", "GPU_AGENT_DEBUG": "1"},
                ),
                120,
            )
    finally:
        agent.stop()
    bad = [r["phase"] for r in rows if r["crash_or_hang"] or r.get("lost_in_windows")]
    print(f"== fault run: {len(rows)} processes, {len(bad)} with a crash, a hang or a lost record: {bad}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
