"""Every interval holds the launches made in it, and a stop loses nothing (issue 42).

In collection windows a window's records stand for their whole period and go out
one period after it ends. Placed where they were drained, an interval held whole
periods' estimates, one or two periods late; and a stop of the agent dropped what
the shims still held. Here a paced loop on the mock (20 000 launches a second in
blocks of 50, idle for 300 ms after every 700 ms, its own launches logged over
time: MOCK_LAUNCH_TRACE) runs under `gpu-agent run` with 2 s intervals and periods
of 0.8 s (8 slots of 100 ms): each interval's profile, read by Go pprof, is set
against the launches the loop made between its bounds. With whole periods placed,
every interval read 2 or 3 periods: -20 % or +20 %. Spread over their spans by
time, the idle parts put launches in the wrong interval: -11 % to +7 %. Split by
each span's shape (the period_shape probe, shim/src/shape.cpp), within 0.22 %.
Then the agent is stopped while the loop runs: the profiles' sum against the
launches the loop made until the stop (before: -3.8 % at 5 s intervals).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from support.env import MOCK_APP, agent_cmd, ground_truth, mock_env, need_ebpf, private_shim
from support.pprof_tool import profile_duration_s, profile_start_ns, raw
from support.shared_agent import shared_agents
from support.windows import launches_at, launches_bracket, periods, read_trace, stall_slack
from support import measures

RATE = 20000
POLL_S = 0.01  # the shim notes its count every 10 ms (GPU_AGENT_POLL_MS)
LOOP_S = 17  # the loop's life; the agent stops 4 s before its end
# --phases: one launch in RARE_EVERY, in every other ms, is the rare kernel's
# (not a multiple of the loop's blocks of 50, which start on the ms)
RARE_EVERY = 777
RARE_KERNEL = "k_cudaLaunchKernel("
UNSAMPLED = "[unsampled]"
# what each period's records stand for, as the shim publishes it (weights.cpp): once
# each, wherever its launches came from (a period line's own, launches joined to it)
PUBLISHED = re.compile(r"period \(pid \d+\): (\d+) launches published over \d+ records")


@pytest.fixture(scope="module")
def agents(tmp_path_factory, built):
    """The record-like tests' agent (the paced run stops its own)."""
    yield from shared_agents(tmp_path_factory)


def run_loop(agents, gt, *loop_args: str, budget: float | None = None, timeout: float = 180, **env: str):
    """The mock's loop under the module's agent (as under `record`, `--budget` where
    budget is given, with the shim's settings in env), ended, with its samples."""
    agent = agents()
    w = agent.run(
        [MOCK_APP, "--paths", "cuLaunchKernel", *loop_args], agent.env(gt, budget=budget, **env), timeout=timeout
    )
    assert w.returncode == 0, w.stderr[-3000:]
    return w


@pytest.fixture(scope="module")
def paced_run(tmp_path_factory, built):
    """The loop under `run --interval 2s`, stopped (SIGTERM) while the loop runs:
    [(interval start, end, launches in its profile, the loop's launches)] on
    CLOCK_MONOTONIC, oldest first, and the agent's stderr."""
    need_ebpf()
    tmp_path = tmp_path_factory.mktemp("paced")
    shim = private_shim(tmp_path / "shim")
    out, trace_file = tmp_path / "profiles", tmp_path / "launches.txt"
    agent = subprocess.Popen(
        agent_cmd("run", "--shim", shim, "--output-dir", out, "--interval", "2s", "--discover-interval", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in agent.stderr:
        if "watching every process" in line:
            break
    else:
        pytest.fail("the agent did not start")
    env = mock_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_DUTY_CYCLE="8",
        GPU_AGENT_WINDOW_MS="100",
        # The launch callbacks count every launch (no count phase to extrapolate
        # from): each period's estimate is exact, and what is left is where it lands.
        GPU_AGENT_TEARDOWN="0",
        # Its count noted every 10 ms (every 100 ms at the defaults, against 10 s
        # intervals): the loop's gaps start and end between two notes.
        GPU_AGENT_POLL_MS=str(int(POLL_S * 1000)),
        MOCK_LAUNCH_TRACE=str(trace_file),
    )
    loop = subprocess.Popen(
        [MOCK_APP, "--paths", "cuLaunchKernel", "--bench", str(RATE * LOOP_S * 7 // 10), "--rate", str(RATE)]
        + ["--gap-ms", "300", "--gap-every-ms", "700", "--block", "50"]
        # A rare kernel (test_a_rare_kernel_keeps_its_stack...): one launch in 777
        # through cudaLaunchKernel, its own kernel, in every other 1 ms.
        + ["--phases", f"1:cudaLaunchKernel:{RARE_EVERY}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(LOOP_S - 4)
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
        assert loop.wait(timeout=60) == 0  # its launch log is whole once it ends
    finally:
        for p in (loop, agent):
            if p.poll() is None:
                p.kill()
                p.wait()
    offset = time.time_ns() - time.monotonic_ns()
    trace = read_trace(trace_file)
    files = sorted(out.glob("*.pb.gz"), key=profile_start_ns)
    starts = [(profile_start_ns(f) - offset) / 1e9 for f in files]
    ends = starts[1:] + [starts[-1] + profile_duration_s(files[-1])]
    rows, samples = [], []
    for f, lo, hi in zip(files, starts, ends):
        samples.append([s for s in raw(f) if s.labels.get("pid") == str(loop.pid)])
        n = sum(s.values[1] for s in samples[-1])
        rows.append((lo, hi, n, launches_at(trace, hi) - launches_at(trace, lo)))
    if os.environ.get("DBG"):
        for r in rows:
            print("ROW %.3f %.3f %d %.0f %+.2f%%" % (r[0], r[1], r[2], r[3], (r[2] / r[3] - 1) * 100 if r[3] else 0))
    return rows, trace, err, samples


def test_each_interval_holds_the_launches_made_in_it(paced_run):
    rows, trace, err, _ = paced_run
    full = [r for r in rows[:-1] if r[0] >= trace[0][0] + 1.0]  # past the attach's short periods
    assert len(full) >= 3, (rows, err)
    # What the shim's polls could not place: an edge in a stop of the whole process
    # (its poller stopped too) and the burst after it (support/windows.stall_slack).
    slack = [stall_slack(trace, lo, POLL_S, RATE) + stall_slack(trace, hi, POLL_S, RATE) for lo, hi, _, _ in full]
    errors = [max(0.0, abs(n - truth) - s) / truth for (_, _, n, truth), s in zip(full, slack)]
    measures.note(worst=max(errors))
    # Placed by their spans, each interval reads its periods' counts prorated: 40 full
    # intervals of 8 runs (5 beside a CPU burner) read within 0.04 %; whole periods
    # read -20 % or +20 %. The pacing's sleeps set the spread: 1 % leaves 25 times it.
    assert max(errors) < 0.01, (errors, slack, rows)


def test_a_stop_loses_nothing(paced_run):
    rows, trace, err, _ = paced_run
    made = launches_at(trace, rows[-1][1]) - launches_at(trace, trace[0][0])
    seen = sum(n for _, _, n, _ in rows)
    measures.note(whole=seen / made - 1)
    assert "did not publish" not in err
    # The launches after the stop (the shim hears of it within its poll) are not the
    # last interval's. 8 runs (5 beside a CPU burner): -0.16 to +0.33 %; before:
    # -3.8 % (5 s intervals).
    assert abs(seen / made - 1) < 0.01, (seen, made, rows)


def test_a_rare_kernel_keeps_its_stack_in_every_interval(paced_run):
    """A kernel launched a few times a second (a model's prefill GEMM, once a
    `generate`) has no sampled launch in most intervals: its stack is sampled at one
    launch in 64 inside windows, and at its first. Its time went to [unsampled] in
    those (4.8 % of Llama decode's GPU time on an H200); now each interval splits it
    by its stacks where it was last sampled (join/estimator.py CarriedStacks)."""
    rows, trace, err, samples = paced_run
    rare = [[s for s in interval if s.frames[0].startswith(RARE_KERNEL)] for interval in samples]
    seen = [ss for ss in rare if ss]
    assert len(seen) >= 4, ([len(ss) for ss in rare], err[-2000:])
    unsampled = [sum(s.values[0] for s in ss if UNSAMPLED in s.frames) for ss in seen]
    assert unsampled == [0] * len(seen), (unsampled, [sum(s.values[0] for s in ss) for ss in seen], err[-3000:])
    # under its own launch path's stack
    assert all("cudaLaunchKernel" in s.frames for ss in seen for s in ss), [s.frames[:6] for s in seen[-1]]


@pytest.mark.parametrize("counter", ["1", "0"], ids=["launch-counter", "clocks"])
def test_a_short_process_is_counted_whole(agents, tmp_path, counter):
    """A 2 s closed loop whose windows slow its launches (as kernel activity does on a
    GPU), under `record --budget 2`. Checked against the shim's own arithmetic (its
    period lines, GPU_AGENT_DEBUG=2), which the host's load cannot move:
    - the profile holds every period's estimate: a record's rows of two periods once
      collapsed into one and the first period was lost (-11 % of the run);
    - until the tails have measured the count phase's callbacks, its rate is
      corrected by at most 300 ns a launch: a share of the first windows' slowdown
      stood in, and those windows pay for the first instrumentation and forced
      samples (first periods +36 %, the run +33 %; short eager processes on an H200
      +20 %).
    How close the estimate lands on the truth depends on the load: 9 runs read -1.5 to
    +3.6 %, one beside two CPU burners on this 2-core VM -21.6 % (bench/gpu judges
    that on a GPU)."""
    gt = tmp_path / "truth.tsv"
    p = run_loop(
        agents,
        gt,
        *("--bench", "500000", "--rate", "0", "--spin-ns", "4000"),
        budget=2,
        MOCK_CUPTI_ACTIVITY_LAUNCH_NS="8000",
        MOCK_CUPTI_CALLBACK_NS="150",
        GPU_AGENT_DEBUG="2",
        GPU_AGENT_LAUNCH_COUNTER=counter,
    )
    lines = periods(p.stderr)
    published = [int(n) for n in PUBLISHED.findall(p.stderr)]
    assert lines and published, p.stderr[-3000:]
    # Not the period lines plus the exit line's joined launches: a period whose window
    # saw no launch (its loop starved under load) is in both, its launches joined to
    # the one before (two three-worker suites read 28.9 % and 17 % too many, 2026-12-03)
    shim = sum(published)
    seen = p.kernel_launches()
    # records' weights are rounded one by one without bias: about 0.02 % here
    assert abs(seen / shim - 1) < 0.005, (seen, published, [(x.est, x.clocks) for x in lines], agents().stderr[-8:])
    # Until three tails have measured the callbacks' cost, at most 300 ns a launch is
    # taken out of the first period's count phase (none before its first tail, which
    # may or may not have ended by then); K_CB's guess took out 1 280 ns here.
    # Only where the count phase's rate, corrected, went on for the rest of the period:
    # where the launch counter (hook_used) or the busy clock (busy_used) stood, the rest
    # went at a rate they measured, which differs from the count phase's by the load's
    # swings (151 518 against 192 692 a second in a parallel run of the suite; 163 509
    # against 225 156 by the busy clock beside two CPU burners).
    first = lines[0]
    assert counter == "1" or not first.hook_used, first
    estimated = not first.hook_used and not first.busy_used
    assert first.count_rate > 0 and (not estimated or 1e9 / first.count_rate - 1e9 / first.rest_rate <= 301), first
    made = sum(n for n, _ in ground_truth(gt).values())
    assert 0.5 < seen / made < 1.5, (seen, made)  # the order of magnitude, whatever the load


@pytest.mark.parametrize("counter", ["1", "0"], ids=["launch-counter", "busy-clock"])
def test_idle_parts_of_a_period_add_nothing(agents, tmp_path, counter):
    """A loop busy 0.35 s, then idle 0.35 s, in periods of about 0.5 s (5 slots of 100 ms,
    torn down between windows): most periods are partly idle. Each period's estimate
    (the shim's period lines) against the launches the loop made in its span
    (MOCK_LAUNCH_TRACE). Extrapolated at the count phase's launches per second, a
    count phase in the busy part read the idle part as busy and one in the idle part
    the busy part as idle: periods from -100 % to +100 %. The launch counter
    (shim/src/launch_hook.cpp) counts no launch in the idle part; where it does not
    cover the launches (GPU_AGENT_LAUNCH_COUNTER=0 here) the busy clock (the launching
    thread's CPU time, shim/src/busy.cpp) adds nothing for it either."""
    trace_file = tmp_path / "launches.txt"
    p = run_loop(
        agents,
        None,
        *("--bench", "1200000", "--rate", "0", "--work-ns", "4000", "--gap-ms", "350", "--gap-every-ms", "350"),
        GPU_AGENT_LAUNCH_COUNTER=counter,
        GPU_AGENT_DEBUG="2",
        GPU_AGENT_DUTY_CYCLE="5",
        GPU_AGENT_WINDOW_MS="100",
        MOCK_LAUNCH_TRACE=str(trace_file),
    )
    (tmp_path / "stderr.txt").write_text(p.stderr)
    trace = read_trace(trace_file)
    rows = []
    for x in periods(p.stderr):
        end, length, unused, est = x.end, x.end - x.start, not (x.hook_used if counter == "1" else x.busy_used), x.est
        # a period after a window-less one may hold that one's launches too (with no
        # period pending to take them): its line's span does not say so, it is left out.
        # Consecutive lines' spans meet to the microsecond, so any gap is such a period,
        # and a loaded host makes short ones: a 36 ms gap before a period that read
        # 14 053 launches against 5 780 in its span (+143 %: the gap's, flat out) in a
        # parallel suite run, where a half-period threshold took it for no gap.
        after_gap = bool(rows) and end - length - rows[-1][1] > 0.001
        if end <= trace[-1][0] and (rows or not unused):  # inside the loop, from the first on the busy clock
            rows.append((end - length, end, unused, est, launches_bracket(trace, end - length, end)))
            if after_gap:
                rows[-1] = rows[-1][:2] + ("after a window-less period", None, None)
    # The counter stands from the loop's first periods; the busy clock once a count
    # phase has caught the thread busy (a tenth of its slot at least), which is the
    # host's scheduling: within 3 s alone, but 7.7 s into a 19 s loop once in 20 runs
    # beside two CPU burners. Either way, from then on it stands in every period.
    assert len(rows) >= 8 and (counter == "0" or rows[0][0] < trace[0][0] + 3), p.stderr[-3000:]
    assert not [r for r in rows if r[2] and r[3] is not None], rows  # and then for every period
    # each estimate's distance outside the launches its span certainly and possibly
    # held (the trace's lines bound them; interpolating between two lines, a loop
    # preempted between them put up to 1 000 launches on the wrong side of an edge:
    # a 90th percentile of 2.34 % once, in a two-worker suite), over the most it held
    errors = sorted(
        max(lo - est, est - hi, 0) / max(hi, 1e4) for *_, est, (lo, hi) in (r for r in rows if r[3] is not None)
    )
    if os.environ.get("DBG"):
        for r in rows:
            if r[3] is not None:
                print("PERIOD %.3f-%.3f est %d true %d-%d" % (r[0], r[1], r[3], *r[4]))
    median, p90 = errors[len(errors) // 2], errors[int(0.9 * len(errors))]
    measures.note(median=median, p90=p90, worst=errors[-1])
    if os.environ.get("DBG"):
        print("IDLE counter=%s n %d median %.5f p90 %.5f worst %.5f" % (counter, len(errors), median, p90, errors[-1]))
    # Measured against the trace's bracket, 20 runs beside two CPU burners (about 30
    # periods each; DBG=1 prints these):
    if counter == "1":
        # counted: median 0 in every run; 90th percentile 0.008-0.029 % (mean 0.014, sd
        # 0.007: 1 in 10 000 at about 0.04 %); worst 1.07 % once. (Interpolated in the
        # trace, a two-worker suite read a 90th percentile of 2.34 % against 2 %.)
        assert median < 0.0005 and p90 < 0.001, (errors, rows)
    else:
        # the busy clock: median 0.09-3.0 % (mean 1.1, sd 0.8: 1 in 10 000 at about 4 %),
        # 90th percentile 2.6-7.2 % (mean 4.7, sd 1.3: about 9.5 %), worst 10.5 %; the
        # count phases' rate per second read the same loop from -100 to +237 %.
        assert median < 0.05 and p90 < 0.1, (errors, rows)


def test_a_process_idle_at_the_attach_is_counted_whole(agents, tmp_path):
    """A process that sleeps 1.5 s after its first launch (the shim attaches then),
    then launches flat out for about 2 s and exits: as the short processes on an H200
    that slept after warming up (+10 to +30 % each). Two things read it wrong, 6 runs
    from -26 to +19 %: the teardown after the window in its sleep waited for an API
    call, so the period where it started had no window and nothing counted its
    launches; and no window had seen a launching thread yet, so the period where it
    started went at the count phase's rate per second, idle part and all. Now the
    main thread's CPU time stands for the launching threads' until a window names
    them, and a window-less period's busy time goes at the next period's rate
    (shim/src/busy.cpp, window.cpp): 10 runs from -0.3 to +1.2 %."""
    gt = tmp_path / "truth.tsv"
    p = run_loop(
        agents,
        gt,
        *("--bench", "500000", "--rate", "0", "--work-ns", "4000", "--idle-first-ms", "1500"),
        GPU_AGENT_DEBUG="2",
        GPU_AGENT_DUTY_CYCLE="10",
        GPU_AGENT_WINDOW_MS="100",
    )
    seen = p.kernel_launches()
    made = sum(n for n, _ in ground_truth(gt).values())
    if os.environ.get("DBG"):
        print("WHOLE %+.2f%%" % ((seen / made - 1) * 100))
        (tmp_path / "stderr.txt").write_text(p.stderr)
    assert abs(seen / made - 1) < 0.05, (seen, made, p.stderr[-3000:])
