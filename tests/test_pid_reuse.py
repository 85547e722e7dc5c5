"""An exited process leaves nothing in the per-process BPF maps once its last
window is built: a new process that is given the same pid (pid reuse) must start
clean, not join the dead process's sampled launches and stacks (issue 16: with a
forced reuse, 1 714 of a new process's 3 000 launches went under the old stack)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gpu_agent.probes import contract as C
from gpu_agent.join.collector import Collector

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

STACK = 0xA1
FRAMES = [0x401000 + 16 * i for i in range(6)]


def test_an_exited_process_leaves_no_map_entries(firer, tmp_path):
    lib, exe = firer
    name = b"_Z6kernelv"
    kid = C.kernel_id(name)
    script = (
        F.Script()
        .full_name(kid, name)
        .corr(7, 211, STACK, FRAMES, 4)
        .node_stack(42, STACK, FRAMES)
        .batch([F.rec(kid, 99, 1000)])  # its sample (corr 7) stays unjoined
        .write(tmp_path / "s.bin")
    )
    col = Collector(str(lib), python_stacks=False)
    col.open()
    try:
        p = subprocess.run([str(exe), str(script)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        pid = int(p.stdout.split()[1])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (pid in col.procs and col.procs[pid].exited):
            col.poll(50)
        assert [i for _, i in col.session.stack_keys(pid)] == [STACK]  # there while it runs...
        assert col.session.graph_nodes(pid)
        col.build_profile()  # its last window
        assert col.session.stack_keys(pid) == []  # ...gone after it
        assert not col.session.graph_nodes(pid)
    finally:
        col.close()
