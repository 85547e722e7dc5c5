"""An agent behind on its events (a busy node: two agents and their jobs on two
cores) still profiles a short process whole: its name and its native frames,
though the process is gone before the agent handles the first of its events.

The attach event carries the name (BPF reads it as the shim attaches); the attach
notes' thread (probes/attach_notes.py) reads the maps as soon as the shim attached.
Before them, this profile's frames read `[unknown]` and its comm `?`: the agent read
/proc when it met the process's first event (the parallel suite's test_end_to_end
and test_streaming failed so)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from gpu_agent.join.collector import Collector
from support.env import MOCK_APP, mock_env, need_ebpf, private_shim
from support.pprof_tool import raw


@pytest.mark.parametrize("filtered", [False, True], ids=["every-process", "pid-filter"])
def test_a_short_process_whose_events_wait_is_named_with_its_frames(tmp_path, filtered):
    """pid-filter: a filter that can judge a process only while it lives (`record`'s,
    its ancestry): decided by the attach note, not again once the process is gone (it
    was, and the process was left out of the profile)."""
    need_ebpf()
    shim = private_shim(tmp_path / "shim")
    app = tmp_path / "gpu-late-job"
    shutil.copy(MOCK_APP, app)
    alive = (lambda pid: os.path.exists(f"/proc/{pid}")) if filtered else None
    col = Collector(str(shim), python_stacks=False, pid_filter=alive)
    col.open()
    try:
        # Nothing polls the main ring while the process runs: its events wait there.
        p = subprocess.Popen(
            [str(app), "--paths", "cuLaunchKernel", "--duration", "2", "--sleep-ms", "1"],
            env=mock_env(CUDA_INJECTION64_PATH=str(shim)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert not os.path.exists(f"/proc/{p.pid}")  # gone before its first event is handled
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (p.pid in col.procs and col.procs[p.pid].exited):
            col.poll(50)
        notes = col.session.attach_notes.counts if col.session.attach_notes else {}
        builder, _ = col.build_profile()
        builder.write(tmp_path / "p.pb.gz")
    finally:
        col.close()
    mine = [s for s in raw(tmp_path / "p.pb.gz") if s.labels.get("pid") == str(p.pid)]
    assert mine, "no samples of the process"
    assert {s.labels.get("comm") for s in mine} == {"gpu-late-job"}
    launched = [s for s in mine if s.frames[0] == "k_cuLaunchKernel(float*, int)"]
    assert launched and all("launch_cuLaunchKernel" in s.frames for s in launched), [s.frames for s in launched]
    assert notes.get("noted", 0) >= 1, notes  # the notes thread read it
