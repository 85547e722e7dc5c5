"""A window's profile names every kernel whose name the shim announced before
the window closed, even if the agent had not polled its ring buffer since (as
when `run` spends seconds symbolizing a new process's first stacks just before
an interval ends: on an H200 that process's whole first interval read
"[unknown kernel 0x...]")."""

from __future__ import annotations

import sys
from pathlib import Path

from support.firing import fire_into
from gpu_agent.probes import contract as C
from gpu_agent.join.collector import Collector
from support.pprof_tool import raw

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

NAME = b"_Z" + b"n" * 1500  # three chunks, as long torch kernel names are
KERNEL = C.kernel_id(NAME)


def test_names_queued_at_the_windows_end_are_in_its_profile(firer, tmp_path):
    lib, exe = firer
    script = (
        F.Script()
        .full_name(KERNEL, NAME)
        .batch([F.rec(KERNEL, 10 + i, 1000) for i in range(5)])
        .write(tmp_path / "s.bin")
    )
    col = Collector(str(lib), python_stacks=False)
    col.open()
    try:
        fire_into(col, exe, script, kernels=5)  # the records are in BPF's maps ...
        assert not col.session.names  # ... and the name is still queued, unread
        builder, _ = col.build_profile()
    finally:
        col.close()
    out = tmp_path / "p.pb.gz"
    builder.write(out)
    kernels = {s.frames[0]: s.values[1] for s in raw(out)}
    assert kernels == {NAME.decode(): 5}, kernels
