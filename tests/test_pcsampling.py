"""PC sampling with stall reasons (opt-in): shim/src/pcsampling.cpp -> bpf/pcsampling.h
-> agent/gpu_agent/join/pc_samples.py and cubin.py -> pprof's pc_samples/count.

The mock's PC Sampling API (shim/mock/mock_pcsampling.c) gives deterministic
samples over three pcs of the real cubin an H100 ran (tests/data/pcsampling, from
bench/gpu/pc_sampling.cu); nvdisasm's listing of that cubin, made on the H100 box,
is the reference for the source lines. Everything is read back through Go's pprof.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter

from gpu_agent.symbols.cubin import read_line_table
from support.env import mock_env, need_ebpf, private_shim
from support.pcsampling import DATA, HERE, HOT, ITERS, KERNEL_NS, PERIOD, nvdisasm_lines, per_launch, record
from support.pprof_tool import pprof, raw


def test_cubin_line_table_matches_nvdisasm_for_every_instruction():
    """pyelftools' reading of .debug_line (relocations off: function-relative pcs) gives
    every instruction of the H100's hot_loop the line nvdisasm gives it."""
    table = read_line_table((DATA / "hot_loop_sm90.cubin").read_bytes())
    ref = nvdisasm_lines()
    assert len(ref) > 100
    got = {pc: table.lookup(HOT, pc) for pc in ref}
    assert {pc: g[1] for pc, g in got.items() if g} == ref
    assert {g[0] for g in got.values()} == {"/work/main/bench/gpu/pc_sampling.cu"}
    assert table.lookup("_Z5otherv", 0x10) is None
    assert not read_line_table(b"not an elf")


def test_pc_samples_exact_under_their_launch_stacks_with_lines_and_stall_reasons(tmp_path):
    out, launched, err = record(tmp_path, GPU_AGENT_PC_SAMPLING="1", GPU_AGENT_PC_SAMPLING_PERIOD=str(PERIOD))
    assert launched == {"launches": 4 * ITERS + 1, "pc_sampling_active": True}
    assert "pc_samples/count" in pprof("-raw", str(out)).split("Samples:", 1)[1].splitlines()[1]
    lines = nvdisasm_lines()
    got: Counter = Counter()
    for s in raw(out):
        pcs = s.values[2]
        if not pcs or s.frames[2] == "k_warm":  # warm-up launches (sampled once started)
            continue
        assert s.values[:2] == [0, 0]  # PC samples carry no GPU time or launches
        # [stall: r] -> hot_loop+0x.. (file:line) -> hot_loop kernel -> ... -> site
        m = re.fullmatch(r"\[stall: (\w+)\]", s.frames[0])
        assert m and s.labels["stall_reason"] == m.group(1), (s.frames[:3], s.labels)
        reason = m.group(1)
        assert not reason.endswith("_not_issued")
        sass = re.fullmatch(r"hot_loop\(float\*, int, int\)\+(0x[0-9a-f]+)", s.frames[1])
        assert sass, s.frames[:3]
        pc = int(sass.group(1), 16)
        assert s.files[1].endswith("bench/gpu/pc_sampling.cu") and s.lines[1] == lines[pc]
        assert s.frames[2] == "hot_loop(float*, int, int)" and s.files[2] == "CUDA_KERNEL"
        site = next((f for f in s.frames if f in ("site_a", "site_b")), "|".join(s.frames[3:]))
        got[(pc, reason, site)] += pcs
    want = Counter()
    for (pc, reason), n in per_launch().items():
        want[(pc, reason, "site_a")] = n * 3 * ITERS
        want[(pc, reason, "site_b")] = n * ITERS
    # (a two-worker run put one job's samples under launch stacks with no Python frame
    # at all, cause not found; since then a failed Python set-up is tried again and, if
    # it never came, said: python_not_set_up and its reason, in the record's own lines,
    # which go with the message)
    assert got == want, f"{sorted(set(got) ^ set(want))[:4]}\n{err[-2000:]}"
    assert lines[0x1D0] == 39  # the hot loop's line: most samples land on it


def test_pc_sampling_is_off_unless_asked(tmp_path):
    """The default: no PC Sampling API call at all (the mock's gate stays shut), and the
    profile has the two usual sample types."""
    out, launched, err = record(tmp_path, GPU_AGENT_DEBUG="1")
    assert launched == {"launches": 4 * ITERS + 1, "pc_sampling_active": False}
    header = pprof("-raw", str(out)).split("Samples:", 1)[1].splitlines()[1]
    assert "pc_samples" not in header and "kernel_launches/count" in header
    assert "PC sampling set up" not in err


def test_pc_sampling_follows_the_collection_windows(tmp_path):
    """With the always-on default's windows (one in 10) the GPU samples only inside
    them: the shim starts sampling when a window opens and stops and drains it when
    it closes. Each launch's samples come whole (the mock samples a kernel as it
    ends), so every (pc, reason) holds the same number k of launches' samples, and k
    is a fraction of the launches."""
    out, launched, err = record(
        tmp_path,
        GPU_AGENT_PC_SAMPLING="1",
        GPU_AGENT_DUTY_CYCLE="10",
        GPU_AGENT_PC_SAMPLING_PERIOD=str(PERIOD),
        GPU_AGENT_DEBUG="1",
        _iters="2000",
    )
    got: Counter = Counter()
    for s in raw(out):
        if s.values[2] and s.frames[2] != "k_warm":
            pc = int(s.frames[1].rsplit("+", 1)[1], 16)
            got[(pc, s.labels["stall_reason"])] += s.values[2]
    one = per_launch()
    assert set(got) == set(one), got
    k = {n // one[key] for key, n in got.items()}
    assert len(k) == 1 and all(n % one[key] == 0 for key, n in got.items()), got
    k = k.pop()
    assert 0 < k < 0.5 * launched["launches"], (k, launched, err[-2000:])


def test_pc_probes_through_real_ebpf_and_their_bad_input(firer, tmp_path):
    """The three probes through the real BPF program, fired by tests/probe_firer from
    the contract alone: a batch's records reach the agent as they are, with its
    process's start tag; the stall reason's name; the cubin, read from the process's
    memory, gives lines. A batch claiming more than GA_PC_BATCH_MAX records is
    dropped and counted, and so are the samples the shim says CUPTI lost."""
    import firer_script as F
    from gpu_agent.probes.bpf_session import BpfSession
    from gpu_agent.join.pc_samples import PcSamples
    from gpu_agent.probes import contract as C

    lib, exe = firer
    kid, crc = 0xABC, 0x5EED
    recs = [
        C.PcRecord(cubin_crc=crc, pc_offset=0x1D0, kernel_id=kid, stall_reason=2, samples=5),
        C.PcRecord(cubin_crc=crc, pc_offset=0x1C0, kernel_id=kid, stall_reason=9, samples=7),
    ]
    sc = (
        F.Script()
        .stall_reason(2, b"smsp__pcsamp_warps_issue_stalled_long_scoreboard")
        .stall_reason(3, b"smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued")
        .cubin(crc, (DATA / "hot_loop_sm90.cubin").read_bytes())
        .pc_batch(recs, dropped=3)
        .pc_batch(recs, count=C.PC_BATCH_MAX + 1)
        .wait()
    )
    path = sc.write(tmp_path / "pc.bin")
    pcs = PcSamples()
    s = BpfSession(str(lib))
    s.on_pc_batch, s.on_stall_reason, s.on_cubin = pcs.on_batch, pcs.on_stall_reason, pcs.on_cubin
    s.open()
    p = subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline().split()[1])
        assert p.stdout.readline().startswith("wait")  # everything fired; the process lives on
        end = time.monotonic() + 10
        while not pcs.window and time.monotonic() < end:
            s.poll(50)
        s.poll(50)
        counters = s.counters()
        window = pcs.take()
        assert {(k[0], k[2:]) for k in window} == {(pid, (kid, crc, 0x1D0, 2)), (pid, (kid, crc, 0x1C0, 9))}
        assert sorted(window.values()) == [5, 7] and len({k[1] for k in window}) == 1
        assert pcs.reason(pid, 2) == "long_scoreboard" and pcs.reason(pid, 3) is None
        start = next(iter(window))[1]
        assert pcs.cubins.wait()  # parsed in its bounded child, asked for by the samples
        assert pcs.line_table(pid, start, crc).lookup(HOT, 0x1D0)[1] == nvdisasm_lines()[0x1D0]
        assert pcs.line_table(pid, start ^ 1, crc) is None and pcs.line_table(pid + 1, start, crc) is None
        assert counters["pc_batches"] == 1 and counters["drop_pc_read"] == 1
        assert counters["drop_pc_samples"] == 3
    finally:
        s.close()
        p.kill()
        p.wait()


def test_pc_sampling_survives_the_agent_restarting(tmp_path, built):
    """An agent that leaves and another that comes (a DaemonSet's restart), at the
    default windows: the shim disables PC sampling at the detach, turns kernel
    activity on at the next attach and only then sets PC sampling up again (CUPTI
    refuses activity while PC sampling is enabled: the mock refuses it too), so the
    second agent gets PC samples."""
    from support.agent import Agent

    need_ebpf()
    shim = private_shim(tmp_path / "shim")
    # 20 ms windows, the defaults this test was written for: with 100 ms ones the first
    # agent's profile held no PC sample here (not yet understood; issue 29's notes)
    env = mock_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_PC_SAMPLING="1",
        GPU_AGENT_DEBUG="1",
        GPU_AGENT_DUTY_CYCLE="10",
        GPU_AGENT_WINDOW_MS="20",
    )
    # The job runs until the second agent has watched it for 6 s (at most 90 s). It ran
    # a fixed 20 s once, and in a three-worker run the first agent let go of it only 19 s
    # after its stop was asked (the shim's attached time read 22.7 s): the second agent
    # came after the job had ended.
    stop_file = tmp_path / "stop"
    env["PY_PC_SAMPLING_STOP"] = str(stop_file)
    first = Agent(tmp_path / "first", "--shim", shim)
    p = subprocess.Popen(
        [sys.executable, str(HERE / "py_pc_sampling.py"), "20", str(KERNEL_NS), "0x1d0:1", "90"],
        env=env,
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4)
        first.stop()
        second = Agent(tmp_path / "second", "--shim", shim)
        time.sleep(6)
        stop_file.touch()
        out, err = p.communicate(timeout=120)
        second.stop()
    finally:
        p.kill()
        first.kill()
    assert p.returncode == 0, err
    assert err.count("attached (pid") == 2 and "detached" in err, err
    assert "profiling disabled" not in err and "NOT_COMPATIBLE" not in err, err
    assert err.count("PC sampling set up") == 2, err
    # kernel activity stays on for PC sampling: the records of launches outside the
    # windows, flushed at the detach too, are dropped, never weighed as unseen ones
    assert " 0 records of unseen launches" in err and "records outside windows" in err, err
    for agent in (first, second):
        # a profile's samples without PC samples (e.g. [unsampled] under a kernel) may
        # have fewer frames: only PC-sampled ones carry [stall] -> pc -> kernel
        pcs = [s for s in agent.samples() if len(s.values) > 2 and s.values[2] and "k_warm" not in s.frames]
        assert sum(s.values[2] for s in pcs) > 0, agent.out_dir
        # the second agent read the cubin from the shim's replay, at its attach
        hot = ("hot_loop(float*, int, int)+0x1d0", nvdisasm_lines()[0x1D0])
        assert {(s.frames[1], s.lines[1]) for s in pcs} == {hot}, agent.out_dir


def test_samples_split_over_launch_stacks_exactly_and_only_for_included_processes():
    """add_to_profile: a kernel's samples split over its rows by GPU time, whole
    (largest remainders); a kernel with no row keeps [unsampled]; _not_issued
    reasons and processes the profile leaves out (record's pid filter) add nothing."""
    from gpu_agent.join.pc_samples import PcSamples, add_to_profile, split
    from gpu_agent.profile.pprof import FrameSpec

    assert split(10, [1, 1, 1]) == [4, 3, 3] and split(7, [0, 0]) == [7, 0] and sum(split(101, [3, 5, 9])) == 101
    pcs = PcSamples()
    pcs.reasons.update(
        {(1, 2): "smsp__pcsamp_warps_issue_stalled_wait", (1, 3): "smsp__pcsamp_warps_issue_stalled_wait_not_issued"}
    )
    pcs.window.update(
        {
            (1, 7, 0xA, 0, 0x10, 2): 10,
            (1, 7, 0xA, 0, 0x10, 3): 4,
            (1, 7, 0xB, 0, 0x20, 2): 5,
            (2, 9, 0xA, 0, 0x10, 2): 6,
        }
    )
    leaf = FrameSpec.kernel("_Z1av")
    stacks = {
        (1, 7, 0xA): [
            ([leaf, FrameSpec.marker("s1")], {"pid": "1"}, 300),
            ([leaf, FrameSpec.marker("s2")], {"pid": "1"}, 100),
        ]
    }
    got = []
    n = add_to_profile(
        pcs,
        stacks,
        lambda k: (f"k{k:x}", f"_Zk{k:x}"),
        lambda t: {"pid": str(t)},
        lambda t, frames, labels, k: got.append((t, [f.function for f in frames], labels, k)),
        included=lambda t: t == 1,
    )
    assert n == 15 and not pcs.window
    assert [(g[1][-1], g[2]["stall_reason"], g[3]) for g in got] == [
        ("s1", "wait", 8),
        ("s2", "wait", 2),
        ("[unsampled]", "wait", 5),
    ]
    assert got[0][1][:2] == ["[stall: wait]", "ka+0x10"] and got[2][1][:2] == ["[stall: wait]", "kb+0x20"]


def test_samples_wait_for_their_kernels_rows_for_a_bounded_time():
    """add_to_profile: a kernel with no row in this profile keeps its samples for the
    next ones (its records come on another path, an activity buffer, later), at most
    HOLD_S seconds however many profiles go by (a loaded agent's 1 s profiles came
    faster than a job's exit), then puts them under [unsampled]; nothing is held where
    may_hold says no (the last profile, an exited process)."""
    from gpu_agent.join.pc_samples import HOLD_S, PcSamples, add_to_profile
    from gpu_agent.profile.pprof import FrameSpec

    now = [100.0]
    pcs = PcSamples(clock=lambda: now[0])
    pcs.reasons[(1, 2)] = "smsp__pcsamp_warps_issue_stalled_wait"
    got = []

    def profile(stacks, may_hold=lambda t: True):
        got.clear()
        return add_to_profile(
            pcs,
            stacks,
            lambda k: (f"k{k:x}", f"_Zk{k:x}"),
            lambda t: {"pid": str(t)},
            lambda t, frames, labels, k: got.append((frames[-1].function, k)),
            may_hold=may_hold,
        )

    rows = {(1, 7, 0xA): [([FrameSpec.kernel("_Zka"), FrameSpec.marker("site")], {"pid": "1"}, 100)]}
    pcs.window[(1, 7, 0xA, 0, 0x10, 2)] = 10
    assert profile({}) == 0 and not got  # held
    pcs.window[(1, 7, 0xA, 0, 0x10, 2)] = 5  # more of the same kernel
    assert profile(rows) == 15 and got == [("site", 5), ("site", 10)]
    pcs.window[(1, 7, 0xA, 0, 0x10, 2)] = 3
    for _ in range(10):  # ten profiles in under HOLD_S: still held
        assert profile({}) == 0
        now[0] += (HOLD_S - 1) / 10
    pcs.window[(1, 7, 0xA, 0, 0x20, 2)] = 2  # the kernel's samples at another PC, held from now
    assert profile({}) == 0
    now[0] += 1.0  # the first ones' HOLD_S is up, not the newer ones'
    assert profile({}) == 3 and got == [("[unsampled]", 3)] and pcs.held
    now[0] += HOLD_S
    assert profile({}) == 2 and got == [("[unsampled]", 2)] and not pcs.held
    pcs.window[(1, 7, 0xA, 0, 0x10, 2)] = 4
    assert profile({}, may_hold=lambda t: False) == 4 and got == [("[unsampled]", 4)]
