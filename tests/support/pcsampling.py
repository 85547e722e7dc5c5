"""The mock's PC sampling as the tests run it: `record` of tests/py_pc_sampling.py,
where its samples land, and the H100 cubin's line table for reference."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from support.env import agent_cmd, mock_env, need_ebpf, private_shim

HERE = Path(__file__).resolve().parent.parent
DATA = HERE / "data" / "pcsampling"
HOT = "_Z8hot_loopPfii"
KERNEL_NS = 256_000
PERIOD = 8  # log2 cycles; the mock: one cycle per ns
PCS = {0x1D0: 6, 0x1C0: 2, 0xD0: 1}  # where the mock's samples land, by weight
ITERS = 100  # site_a 3 launches + site_b 1, each iteration


def nvdisasm_lines() -> dict[int, int]:
    """pc offset -> source line, from `nvdisasm -g` of the cubin (on the H100 box)."""
    out, line = {}, None
    for text in (DATA / "hot_loop_sm90.nvdisasm.txt").read_text().splitlines():
        m = re.search(r'//## File ".*", line (\d+)', text)
        if m:
            line = int(m.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4})\*/", text)
        if m and line is not None:
            out[int(m.group(1), 16)] = line
    return out


def per_launch() -> dict[tuple[int, str], int]:
    """The mock's samples of one launch (mock_pcsampling.c): D >> period over the pcs by
    weight (floors, the rest to the last), each 3/4 mio_throttle, the rest selected; the
    mio_throttle_not_issued subset is left out by the agent."""
    total, weights, given, out = KERNEL_NS >> PERIOD, sum(PCS.values()), 0, {}
    for i, (pc, w) in enumerate(PCS.items()):
        s = total - given if i == len(PCS) - 1 else total * w // weights
        given += s
        out[(pc, "mio_throttle")] = s * 3 // 4
        out[(pc, "selected")] = s - s * 3 // 4
    return out


def record(tmp_path: Path, _iters: str = str(ITERS), **env: str) -> tuple[Path, dict, str]:
    need_ebpf()
    out = tmp_path / "pc.pb.gz"
    shim = private_shim(tmp_path / "shim")  # no other agent on the host attaches to it
    e = mock_env(GPU_AGENT_SAMPLE_PERIOD="1", **env)  # every launch's stack: an exact 3:1
    p = subprocess.run(
        agent_cmd(
            "record",
            "--shim",
            shim,
            "-o",
            out,
            "--",
            sys.executable,
            str(HERE / "py_pc_sampling.py"),
            _iters,
            str(KERNEL_NS),
            ",".join(f"{pc:#x}:{w}" for pc, w in PCS.items()),
        ),
        env=e,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=HERE,
    )
    assert p.returncode == 0, p.stderr
    return out, json.loads(p.stdout.strip().splitlines()[-1]), p.stderr
