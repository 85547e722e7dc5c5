"""The shim's estimator in process, over a fake clock (no CUDA, no eBPF, no agent).

As Kineto tests its CUPTI record path against MockCuptiActivities: a source file of
the shim is compiled on its own with a driver of ours (tests/shim_unit/*_unit.cpp)
that plays the clock and what the file reads, so a case of the per-interval issue
runs in milliseconds and the same way every time. The mock's runs under a real
agent (tests/test_mix_cuts.py) stay the end-to-end check.

mix.cpp (tests/shim_unit/mix_unit.cpp): where a period's launch mix changes. The
launch counter's hits per launch function are noted at every poll; a change is cut
at once and placed at the poll that parts the period into its two sides.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "tests" / "shim_unit"
CUDA_INC = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
if not Path(CUDA_INC, "cupti.h").exists():  # deploy/install-deps.sh's pip-wheel headers
    CUDA_INC = "/opt/gpu-agent-cuda/include"

# The H200's phased job: its MLP code launches 74 000 a second, half through cudart
# (GELU) and half through cuBLAS's cuLaunchKernelEx (the GEMMs); its eager code
# 150 000 a second, all through cudart.
MLP, EAGER = "74000:0.5", "150000:1"
POLL_MS = 100  # GPU_AGENT_POLL_MS's default


@pytest.fixture(scope="module")
def mix_unit(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("mix") / "mix_unit"
    subprocess.run(
        ["g++", "-std=c++17", "-O1", "-fno-exceptions", "-fno-rtti", "-Wall", "-Werror", "-Wno-comment"]
        + ["-I", str(REPO / "shim/src"), "-I", str(REPO / "shim/include"), "-I", CUDA_INC]
        + ["-o", str(exe), str(HERE / "mix_unit.cpp")],
        check=True,
        timeout=120,
    )
    return exe


def mix(exe: Path, change_ms: int, end_ms: int, before: str, after: str, burst_ms: int = 0) -> dict:
    """mix_unit's RESULT line as {key: ms}: cut_ms and since_ms (a cut), lately_ms and
    since_ms (found at the planned end), or {} (none)."""
    args = [str(exe), str(POLL_MS), str(change_ms), str(end_ms), before, after] + ([str(burst_ms)] if burst_ms else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=10).stdout
    line = re.search(r"^RESULT (.*)$", out, re.M)
    assert line, out
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


@pytest.mark.parametrize("change_ms", [200, 250, 350, 700, 1500])
@pytest.mark.parametrize("sides", [(MLP, EAGER), (EAGER, MLP)], ids=["mlp-eager", "eager-mlp"])
def test_a_change_is_cut_at_once_and_placed_at_its_poll(mix_unit, change_ms, sides):
    """Wherever the change lies past the period's first slot, the poll 200 ms after it
    (RECENT_NS, rounded up to a poll) cuts, and places it at the poll that parts the
    two sides (the change's own, or one on either side when it falls between). In
    an H200 run of eager and MLP code every 3 s, a period whose MLP part ended 200 ms
    in (just after its window, in its second slot) was never cut: the 300 ms before
    the newest poll that left 200 ms after it held 100 ms of eager code already (0.75
    of cudart's launches where MLP's are 0.5 and eager's 1), so the two sides moved
    0.25 apart (CHANGED: 0.3); its 1.25 s of eager launches took the MLP window's
    kernels, and its interval's GPU ns read +22.7 %."""
    got = mix(mix_unit, change_ms, 3000, *sides)
    assert "cut_ms" in got, got
    assert got["cut_ms"] <= change_ms + 300, got  # 200 ms of the new side, a poll late at most
    assert abs(got["since_ms"] - change_ms) < POLL_MS, got  # the poll on either side of it


@pytest.mark.parametrize("burst_ms", [0, 10, 50])
def test_a_steady_mix_is_not_cut(mix_unit, burst_ms):
    """A job whose launch functions take turns faster than its polls (an MLP's GEMMs
    and GELUs inside each step, or steps of one kind then the other up to 50 ms) is
    one mix: no cut, and none found at the planned end."""
    assert mix(mix_unit, 10**6, 3000, MLP, MLP, burst_ms) == {}


def test_a_change_late_in_a_period_is_found_at_its_planned_end(mix_unit):
    """A change too recent for a cut (under 200 ms before the planned end) is still
    placed (ga_mix_changed_lately), so that window.cpp gives each side to a window
    that saw it."""
    got = mix(mix_unit, 2900, 3000, MLP, EAGER)
    assert got == {"lately_ms": 3000, "since_ms": 2900}, got
