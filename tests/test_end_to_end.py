"""The whole pipeline: mock CUDA app -> real shim -> real eBPF -> agent -> pprof, read by Go pprof."""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, agent_cmd, ground_truth, list_paths, mock_env, need_ebpf, shim_without_cbid
from support.pprof_tool import raw, top

GRAPH_PATHS = {"cuGraphLaunch", "cuGraphLaunch_ptsz", "cudaGraphLaunch", "cudaGraphLaunch_ptsz"}


def record(tmp_path, *workload_args, shim=None, env=None, name="out.pb.gz"):
    out = tmp_path / name
    cmd = ["record", "-o", out]
    if shim:
        cmd += ["--shim", shim]
    proc = subprocess.run(
        agent_cmd(*cmd, "--", MOCK_APP, *workload_args),
        env=env or mock_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc, out


def kernel_names(path: str) -> list[str]:
    if path in GRAPH_PATHS:
        return [f"k_{path}_node{i}(float*, int)" for i in range(3)]
    return [f"k_{path}(float*, int)"]


def assert_path_attributed(samples, path: str) -> None:
    """The path's kernels are leaves, and some sample of each has launch_<path> in its stack.

    Graph kernels sit under [cuda graph replay] above the stack that captured
    them (capture_<path>); the replay site is their cuda_graph_replay label."""
    for kernel in kernel_names(path):
        mine = [s for s in samples if s.frames and s.frames[0] == kernel]
        assert mine, f"kernel {kernel} missing from the profile"
        assert all(s.files[0] == "CUDA_KERNEL" for s in mine)
        if path in GRAPH_PATHS:
            assert all(s.frames[1] == "[cuda graph replay]" and f"capture_{path}" in s.frames for s in mine), [
                s.frames[:6] for s in mine
            ]
            assert any(s.labels.get("cuda_graph_replay") == f"launch_{path}" for s in mine), (
                f"{kernel}: no replay label launch_{path}: {[s.labels for s in mine]}"
            )
            continue
        assert any(f"launch_{path}" in s.frames for s in mine), (
            f"{kernel}: no stack contains launch_{path}; stacks: {[s.frames[:6] for s in mine]}"
        )


@pytest.fixture(scope="module")
def all_paths_profile(tmp_path_factory, built):
    need_ebpf()
    tmp = tmp_path_factory.mktemp("allpaths")
    gt = tmp / "truth.tsv"
    proc, out = record(tmp, "--paths", "all", "--iters", "300", env=mock_env(gt))
    assert proc.returncode == 0, proc.stderr
    return raw(out), ground_truth(gt), out, proc


def test_every_launch_path_has_kernel_leaf_and_launching_function(all_paths_profile):
    samples, _, _, _ = all_paths_profile
    paths = list_paths()
    assert len(paths) >= 21, paths
    for path in paths:
        assert_path_attributed(samples, path)


def test_per_kernel_gpu_ns_equals_ground_truth_exactly(all_paths_profile):
    samples, truth, _, _ = all_paths_profile
    got_ns, got_n = defaultdict(int), defaultdict(int)
    for s in samples:
        got_ns[s.system_names[0]] += s.values[0]
        got_n[s.system_names[0]] += s.values[1]
    assert dict(got_ns) == {k: v[1] for k, v in truth.items()}
    assert dict(got_n) == {k: v[0] for k, v in truth.items()}


def test_labels_and_long_names(all_paths_profile):
    samples, truth, out, proc = all_paths_profile
    assert all({"pid", "comm", "cuda_device", "cuda_stream"} <= s.labels.keys() for s in samples)
    graph = [s for s in samples if s.frames[0].startswith("k_cuGraphLaunch_node")]
    assert graph and all("cuda_graph" in s.labels for s in graph)
    plain = [s for s in samples if s.frames[0] == "k_cuLaunchKernel(float*, int)"]
    assert plain and all("cuda_graph" not in s.labels for s in plain)
    longest = max(truth, key=len)  # mangled
    assert len(longest) > 5000
    long_samples = [s for s in samples if s.system_names[0] == longest]
    assert long_samples, "the long kernel name was cut"
    demangled = long_samples[0].frames[0]
    assert demangled.startswith("void k_long_name<0, 1, 2,") and demangled.endswith("999>(float*, int)"), (
        demangled[:80] + "..." + demangled[-80:]
    )
    assert "gpu_time" in top(out) or "Type: gpu_time" in top(out)


def test_removing_one_cbid_subscription_fails_the_path_check(tmp_path, built):
    """Guard: a shim built without cuLaunchKernel's callback loses that path's stacks,
    and the runtime launch's too: the shim counts and samples runtime launches at the
    driver launch under them (the driver domain's callbacks only)."""
    need_ebpf()
    variant = shim_without_cbid(tmp_path / "libgpu_agent_shim.so")
    proc, out = record(
        tmp_path, "--paths", "cuLaunchKernel,cudaLaunchKernel,cuLaunchKernelEx", "--iters", "50", shim=variant
    )
    assert proc.returncode == 0, proc.stderr
    samples = raw(out)
    assert_path_attributed(samples, "cuLaunchKernelEx")  # another driver entry still works
    for path in ("cuLaunchKernel", "cudaLaunchKernel"):
        with pytest.raises(AssertionError, match=f"no stack contains launch_{path}"):
            assert_path_attributed(samples, path)
        # ...and its time is still there, under [unsampled], never dropped.
        assert any(s.frames[:2] == [f"k_{path}(float*, int)", "[unsampled]"] for s in samples)


def test_record_returns_the_commands_exit_code(tmp_path, built):
    need_ebpf()
    proc = subprocess.run(
        agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--", "sh", "-c", "exit 7"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 7, proc.stderr


def test_record_keeps_its_command_s_pid_until_the_profile_is_written():
    """`record` learns of its command's exit without reaping it (commands/record.py's
    exited()): until the profile is written, /proc/PID is still the command's, which the
    pid filter reads for a process its events name first after the exit (a note handled
    late left a short command out whole, silently)."""
    from gpu_agent.commands.record import exited

    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert not exited(child.pid)
        child.stdin.close()  # the command ends
        for _ in range(500):
            if exited(child.pid):
                break
            time.sleep(0.01)
        assert exited(child.pid) and Path(f"/proc/{child.pid}").exists()  # a zombie: its pid held
        assert Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        assert child.wait(timeout=10) == 0  # its status still there for the reap


def test_shim_path_prints_the_built_shim(built):
    out = subprocess.run(agent_cmd("shim-path"), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(SHIM.resolve())
