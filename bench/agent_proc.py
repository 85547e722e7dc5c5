"""Start `gpu-agent run` for a benchmark and wait until its probes are attached.

Shared by bench/launch_cost.py and bench/gpu/ (run_overhead.py, ab_overhead.py,
interval_accuracy.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import deque


def start_agent(output_dir: str, interval: str) -> subprocess.Popen:
    """The agent process, once it has printed its `watching` line; exits the
    benchmark with the agent's output if it stops before that. Its stderr is
    drained from then on by a thread (a full pipe would block the agent), and its
    last lines are kept in the returned process's `log_tail`."""
    p = subprocess.Popen(
        [sys.executable, "-m", "gpu_agent", "run", "--output-dir", output_dir, "--interval", interval],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    for line in p.stderr:  # wait until every probe is attached
        seen.append(line)
        if "watching every process" in line:  # not "also watching" a copy
            p.log_tail = deque(seen, maxlen=50)
            threading.Thread(target=lambda: p.log_tail.extend(p.stderr), daemon=True).start()
            return p
    raise SystemExit("agent failed to start: " + "".join(seen))
