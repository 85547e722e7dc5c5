"""CUPTI torn down after every window and at every detach (shim/src/teardown.cpp).

On a GPU, once kernel activity has been on, every later launch of the process pays
about 1-1.4 us until cuptiFinalize. The mock models that: it counts the kernels
that ran with kernel activity enabled earlier and no finalize since
(MOCK_CUDA_REPORT=1), and it aborts, as a GPU would crash, when a thread calls
into CUPTI while another is inside cuptiFinalize. These tests run the real shim
under a `gpu-agent run` the module shares (real eBPF, Go pprof) on the mock stack:
- windows and detaches leave no residual behind, and without the teardown
  (GPU_AGENT_TEARDOWN=0) nearly every launch between windows pays it;
- threads that launch, sample stacks and replay graphs during hundreds of
  teardowns never call CUPTI inside a finalize;
- the mock itself reports a call during a finalize as the crash it would be.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap

import pytest

from support.env import BENCH_SHIM, MOCK_APP, MOCK_DIR, SHIM, ground_truth, mock_env
from support.shared_agent import shared_agents
from support.windows import KERNEL, shim_exit_stats
from support import measures

RESIDUAL = re.compile(
    r"mock libcuda: (\d+) kernels ran with CUPTI's residual .*, (\d+) of them while a cuptiActivityFlushAll ran"
)
TEARDOWNS = re.compile(
    r"teardowns \(pid \d+\): (\d+), finalize mean [\d.]+ max [\d.]+ ms, (\d+) waited "
    r"for callbacks in CUPTI, (\d+) CUPTI calls skipped, (\d+) failed or put off"
)

# How far a 3 s run's estimate may land from the truth when its launches between
# windows are extrapolated from about 30 count phases of 20 ms: on a quiet host
# within 2 %, but where other processes take the CPUs in slices of a few ms each
# count phase's rate is a noisy sample (this 2-core machine with two spinning
# processes beside it: -2.3 to +6.1 % over 12 runs; a CI host read -5.4 %).
EXTRAPOLATED = 0.08


@pytest.fixture(scope="module")
def agents(tmp_path_factory, built):
    yield from shared_agents(tmp_path_factory)


def record(agents, tmp_path, *mock_args, duty=5, shim=None, **env):
    """The mock under the module's agent of `shim`, as `record --duty-cycle duty`: the
    workload (its samples read), the truth's path, its stderr and the kernels that ran
    with CUPTI's residual (the mock's count)."""
    gt = tmp_path / "truth.tsv"
    agent = agents(shim or SHIM)
    e = agent.env(gt, duty, **{"GPU_AGENT_WINDOW_MS": "20", "GPU_AGENT_DEBUG": "1", "MOCK_CUDA_REPORT": "1", **env})
    w = agent.run([MOCK_APP, *mock_args], e, timeout=180)
    assert w.returncode == 0, w.stderr[-3000:]
    residual = RESIDUAL.search(w.stderr)
    assert residual, w.stderr[-2000:]
    return w, gt, w.stderr, int(residual.group(1))


def residual_in_flush(err: str) -> int:
    """Of the residual's launches, those made while a cuptiActivityFlushAll ran
    (the mock's count): as many as the flush takes time at the loop's rate."""
    return int(RESIDUAL.search(err).group(2))


def test_windows_leave_no_residual_and_the_estimate_holds(agents, tmp_path):
    # A closed loop (each launch spins 3 us): an open, paced loop catches up after the
    # stalls of a loaded host and reads low (docs/estimator.md: a known limit).
    out, gt, err, residual = record(agents, tmp_path, "--bench", "900000", "--spin-ns", "3000", "--block", "100")
    truth = ground_truth(gt)[KERNEL]
    td = TEARDOWNS.search(err)
    windows = shim_exit_stats(err)["windows"]
    assert td and windows >= 20 and int(td.group(1)) >= windows - 1, err[-2000:]
    assert int(td.group(4)) == 0, td.group(0)
    # Between a window's end and the next launch's API exit (where the teardown
    # runs) some launches still pay: those made during the window's last flush,
    # as many as the flush takes time (30-40 a window on this quiet 2-core host,
    # 35-55 beside two CPU burners, 124 in a parallel suite run that read 3 707 in
    # 30 windows), and a few around it (2-3 a window, quiet or loaded). The
    # teardown's own promise is the part outside the flushes; the whole stays
    # under 1 % of the launches.
    in_flush = residual_in_flush(err)
    assert residual - in_flush <= 100 * windows, (residual, in_flush, windows)
    assert residual < truth[0] // 100, (residual, in_flush, windows)
    est_ns, est_launches = out.kernel_totals()[KERNEL]
    measures.note(launches=est_launches / truth[0] - 1, gpu_ns=est_ns / truth[1] - 1, residual=residual / truth[0])
    assert abs(est_launches / truth[0] - 1) < EXTRAPOLATED, (est_launches, truth)
    assert abs(est_ns / truth[1] - 1) < EXTRAPOLATED, (est_ns, truth)


def test_the_late_subscription_experiment_windows_without_loss_and_estimates(agents, tmp_path):
    """The benchmark build's GPU_AGENT_EXP_SUBSCRIBE=late (CUPTI subscribed again only
    for the count phase, nothing of it between windows: bench/gpu's in-process A/B)
    still tears down after every window, loses no record, and its estimate holds.
    (Subscribed at the next poll instead of at the count phase's edge, its windows
    came up to a poll late and the estimate read -18 to +7 %.)"""
    out, gt, err, residual = record(
        agents,
        tmp_path,
        "--bench",
        "900000",
        "--spin-ns",
        "3000",
        "--block",
        "100",
        shim=BENCH_SHIM,
        GPU_AGENT_EXP_SUBSCRIBE="late",
    )
    td = TEARDOWNS.search(err)
    stats = shim_exit_stats(err)
    assert td and stats["windows"] >= 20 and int(td.group(1)) >= stats["windows"] - 1, err[-2000:]
    assert int(td.group(4)) == 0 and "(0 lost by CUPTI)" in err, err[-2000:]
    truth = ground_truth(gt)[KERNEL]
    assert residual < truth[0] // 100, residual
    est_ns, est_launches = out.kernel_totals()[KERNEL]
    assert abs(est_launches / truth[0] - 1) < EXTRAPOLATED, (est_launches, truth)


def test_without_the_teardown_the_residual_stays(agents, tmp_path):
    """The same run with GPU_AGENT_TEARDOWN=0: every launch after the first window
    pays, which is what the mock's count must show (the test above can fail)."""
    _, gt, err, residual = record(agents, tmp_path, "--bench", "300000", "--rate", "200000", GPU_AGENT_TEARDOWN="0")
    assert not TEARDOWNS.search(err)
    assert residual > 0.5 * ground_truth(gt)[KERNEL][0], residual


def test_a_detach_leaves_nothing_behind(agents, tmp_path):
    """The benchmark build attaches for 200 ms and detaches for 400 ms, over and over
    (GPU_AGENT_EXP_TOGGLE_MS), under one agent, with continuous collection while
    attached: kernel activity is on the whole attachment, so only the teardown at
    each detach takes the residual away from the 400 ms that follow."""
    # Blocks of 100: the launches of a paced block that starts before a detach's
    # teardown ends all pay, and blocks of 1 000 read 5 to 3 466 (old shim and new
    # alike, 6 runs each); blocks of 100, 505 to 1 104 in 8 runs.
    _, gt, err, residual = record(
        agents,
        tmp_path,
        "--bench",
        "600000",
        "--rate",
        "200000",
        "--block",
        "100",
        duty=1,
        shim=BENCH_SHIM,
        GPU_AGENT_EXP_TOGGLE_MS="200:400",
        GPU_AGENT_POLL_MS="10",
    )
    detaches = len(re.findall(r"detached \(pid \d+\): agent gone", err))
    td = TEARDOWNS.search(err)
    assert detaches >= 3 and td and int(td.group(1)) >= detaches, err[-2000:]
    # (without the teardown about two thirds of all launches would pay.) What pays is
    # the launches between each detach and its teardown's end, so the host's load
    # moves it: 1 105-3 692 in 6 runs beside two CPU burners, 3 605 once in a
    # three-worker suite (against 0.5 %, 3 000, then); 1 % is 1.6 x the worst seen
    # and 1/60 of the failure's.
    assert residual < ground_truth(gt)[KERNEL][0] // 100, (residual, detaches)


NO_GRAPH_PATHS = ",".join(
    p
    for p in (
        "cuLaunch cuLaunchGrid cuLaunchGridAsync cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx "
        "cuLaunchKernelEx_ptsz cuLaunchCooperativeKernel cuLaunchCooperativeKernel_ptsz "
        "cuLaunchCooperativeKernelMultiDevice cudaLaunchKernel cudaLaunchKernel_ptsz cudaLaunchKernelExC "
        "cudaLaunchKernelExC_ptsz cudaLaunchCooperativeKernel cudaLaunchCooperativeKernel_ptsz "
        "cudaLaunchCooperativeKernelMultiDevice"
    ).split()
)


def test_threads_never_call_cupti_inside_a_finalize(agents, tmp_path):
    """Four threads launch through every launch path but graphs (a process with
    graphs is not torn down, next test) with a stack
    sample at every launch (cuptiGetTimestamp) while windows of 5 ms open and close
    every 10 ms, each ending in a 3 ms finalize on whichever thread's launch comes
    first: the mock aborts the process if any other thread calls CUPTI meanwhile."""
    _, _, err, _ = record(
        agents,
        tmp_path,
        "--paths",
        NO_GRAPH_PATHS,
        "--threads",
        "4",
        "--duration",
        "4",
        duty=2,
        GPU_AGENT_WINDOW_MS="5",
        GPU_AGENT_SAMPLE_PERIOD="1",
        MOCK_CUPTI_FINALIZE_US="3000",
    )
    assert "this crashes on a GPU" not in err
    td = TEARDOWNS.search(err)
    assert td and int(td.group(1)) >= 100, err[-2000:]


def test_buffers_cupti_keeps_at_a_finalize_go_back_to_the_pool(agents, tmp_path):
    """CUPTI does not hand back the empty buffers it holds at cuptiFinalize (an H100's
    1 002 teardowns drained the shim's 64-buffer pool: 127 426 of 180 983 window
    records lost; the mock keeps them too). After a finalize, which frees everything
    CUPTI had, the shim takes them back: hundreds of teardowns on a 2-buffer pool
    lose no record."""
    out, gt, err, _ = record(
        agents,
        tmp_path,
        "--paths",
        "cuLaunchKernel",
        "--threads",
        "2",
        "--duration",
        "3",
        "--sleep-ms",
        "1",
        duty=2,
        GPU_AGENT_WINDOW_MS="5",
        GPU_AGENT_BUFFER_POOL_MB="2",
    )
    td = TEARDOWNS.search(err)
    assert td and int(td.group(1)) >= 50, err[-2000:]
    stats = shim_exit_stats(err)
    # (a launch the poller's window edge meets between its callback and its kernel
    # has no record: at most one a thread a window, not what this is about)
    assert stats["windows"] >= 50 and stats["records"] >= 0.99 * stats["launches"] > 0, stats
    assert re.search(r"\(0 lost by CUPTI\)", err), err[-2000:]
    back = re.search(r"(\d+) buffers CUPTI kept taken back, (\d+) buffer requests refused", err)
    # the mock holds one buffer ahead at each finalize (the spare it took at the
    # window's enable); without the take-back the pool is empty after two teardowns
    # and CUPTI's requests are refused from then on. (A cycle whose window and tail
    # filled a buffer uses the spare up, and its flush hands it back itself: nothing
    # is kept at that finalize, 1 or 2 of 238 here.)
    assert back and int(back.group(1)) >= 0.95 * int(td.group(1)) and int(back.group(2)) == 0, err[-2000:]


MOCK_FINALIZE_RACE = textwrap.dedent("""
    import ctypes, sys, threading
    cupti = ctypes.CDLL(sys.argv[1])
    ts = ctypes.c_uint64()
    go = threading.Event()
    def poll():
        go.set()
        while True:
            cupti.cuptiGetTimestamp(ctypes.byref(ts))
    threading.Thread(target=poll, daemon=True).start()
    go.wait()
    cupti.cuptiFinalize()
    print("finalize returned")
""")


def test_the_mock_reports_a_call_during_finalize_as_a_crash(tmp_path, built):
    p = subprocess.run(
        [sys.executable, "-c", MOCK_FINALIZE_RACE, str(MOCK_DIR / "libcupti.so.13")],
        env=mock_env(MOCK_CUPTI_FINALIZE_US="200000"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    assert (
        re.search(r"mock libcupti: cupti\w+ called while another thread is inside cuptiFinalize", p.stderr)
        or "cuptiFinalize called while another thread is inside CUPTI" in p.stderr
    ), p.stderr
    assert "finalize returned" not in p.stdout


def test_a_process_with_graphs_is_not_torn_down(agents, tmp_path):
    """On an H100 CUPTI did not start again after a finalize in a process that had
    instantiated a CUDA graph (the mock refuses it the same way). Such a process
    keeps CUPTI subscribed between windows and at its detach, and its windows go
    on; a teardown there would leave it with no window at all."""
    _, _, err, _ = record(agents, tmp_path, "--threads", "2", "--duration", "3", duty=2, GPU_AGENT_WINDOW_MS="5")
    assert "does not start again" not in err, err[-2000:]
    assert "CUPTI stays subscribed between windows" in err, err[-2000:]
    assert shim_exit_stats(err)["windows"] >= 100, err[-2000:]


def test_another_cupti_client_between_windows_is_named_and_waited_for(agents, tmp_path):
    """A profiler in the profiled process (torch.profiler, on the thread that
    launches) subscribes to CUPTI when it is free: between two windows, after a
    teardown. The shim's next subscription is refused; it names the client (as
    cuptiSubscribe_v2 reports it), opens no window while the client holds CUPTI
    (counted as skipped), says so once, and collects again once it lets go. It
    never asks for CUDA 13.3's multi-subscriber mode, where cuptiFinalize beside
    another subscriber does nothing and CUPTI's cost would stay."""
    out, gt, err, residual = record(
        agents, tmp_path, "--bench", "600000", "--rate", "200000", "--block", "100", "--cupti-client", "1000:500"
    )
    took = re.search(r"(\d+) ms in\n", err)
    assert took and "cupti-client: released" in err, err[-2000:]
    said = re.findall(r"CUPTI for test-profiler took CUPTI between windows in pid \d+; no window until it lets go", err)
    assert len(said) == 1, err[-3000:]
    assert err.index(said[0]) < err.index("CUPTI is the shim's again"), err[-3000:]
    skipped = int(re.search(r"; (\d+) skipped;", err).group(1))
    assert skipped >= 2, err[-2000:]  # 500 ms of 100 ms periods
    # and windows again after it: about one in each of the 3 s run's 30 periods, less those skipped
    assert shim_exit_stats(err)["windows"] >= 18, err[-2000:]
    # Nothing lingers once it let go: the teardown's own part of the residual, outside
    # the windows' last flushes (as test_windows_leave_no_residual_and_the_estimate_holds
    # judges it). The flushes' part is their length at this paced loop's rate, which the
    # host's load sets: in blocks of 1 000 it read 0-3 866 of 600 000 in 18 runs three
    # at once beside a CPU burner, and 9 250 in all once in a three-worker suite (against
    # 1 %); the part outside them 20-1 026 (whole blocks at an edge). In blocks of 100,
    # 24 such runs read 22-292 outside them (the bound, 100 a window, is about 2 200),
    # and 0-3 106 in them.
    in_flush = residual_in_flush(err)
    assert residual - in_flush <= 100 * shim_exit_stats(err)["windows"], (residual, in_flush)
