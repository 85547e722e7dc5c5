"""A mapped library swapped for a FIFO (issue 16, item 3): the symbolizer reopened
files by their cached path, and a blocking open() of a FIFO hung the root agent
for good, while `health` still said healthy (the watchdog: tests/test_run.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

from gpu_agent.symbols.native import Symbolizer


def test_a_mapped_file_swapped_for_a_fifo_never_hangs_the_symbolizer(tmp_path):
    """A process can move its mapped executable's directory away and put a FIFO at
    the old path. The symbolizer reopens files lazily by that path: a blocking
    open() of the FIFO hung the root agent for good (issue 16). It must only ever
    open regular files, without blocking."""
    lib = tmp_path / "lib"
    lib.mkdir()
    prog = lib / "prog"
    shutil.copy("/bin/sleep", prog)
    proc = subprocess.Popen([str(prog), "30"])
    try:
        time.sleep(0.2)
        ip = next(
            int(line.split("-")[0], 16) + 0x10
            for line in open(f"/proc/{proc.pid}/maps")
            if line.rstrip().endswith(str(prog)) and "x" in line.split()[1]
        )
        s = Symbolizer()
        s.symbolize(proc.pid, [1])  # the maps snapshot: every mapped file identified
        lib.rename(tmp_path / "moved")
        lib.mkdir()
        os.mkfifo(prog)
        out = []
        t = threading.Thread(target=lambda: out.append(s.symbolize(proc.pid, [ip])), daemon=True)
        t.start()
        t.join(10)
        hung = t.is_alive()
        if hung:  # release the old code's blocked open() so the test can end
            os.close(os.open(prog, os.O_WRONLY | os.O_NONBLOCK))
        assert not hung, "symbolize() blocked opening a FIFO"
        assert len(out[0]) == 1
    finally:
        proc.kill()
        proc.wait()
