"""The tests whose verdict depends on timing or on the host's load, and `make flaky`,
which runs each of them many times while two CPU-burning processes share the machine.

Inventory: each test on FLAKY below, what in it depends on chance, and what would make
it deterministic.

Estimates from counts taken in real time. The mock's loops and the shim's windows run
on the wall clock, so how many launches a count phase or a window meets depends on how
the host schedules them; each test bounds the estimate's error (EXTRAPOLATED 8 % in
test_teardown; 3 to 12 % in test_windows; 10 % per period in test_periods):
- test_teardown: test_windows_leave_no_residual_and_the_estimate_holds and
  test_the_late_subscription_experiment_windows_without_loss_and_estimates;
- test_windows: test_audit_estimate_lands_on_the_full_trace_of_the_same_run,
  test_outside_windows_nothing_is_collected_and_the_estimate_is_right,
  test_windows_that_slow_launches_do_not_bias_the_estimate (the callbacks' cost is
  also timed by the windows' tails), test_launches_at_a_window_edge_are_not_the_windows
  (torn-down; its unseen records, lumps of whole blocks, 0-3.25 % of the records in 12
  runs beside two burners and 5.1 % once in a two-worker suite: bound 10 %, where
  edges not told apart would leave 35-40 % unseen);
- test_periods: test_every_period_estimates_its_own_launches and
  test_a_free_count_piece_in_a_cycle_of_its_own (the piece at its latest place, ending
  where the count phase begins: at a random place, one CI run in many met that edge by
  chance, and the piece's cycle ran on into the count phase without its teardown).
  A piece a late poller left 0.1 ms long (0 launches of 0.39 interpolated) read
  -100 % once in a three-worker suite (2026-12-03). CHANGED HERE: each piece within
  the bracket of the loop's log, a line every 50 launches (57 pieces of ~100 ms in 3
  runs beside two burners: every count inside its bracket of 100).
  Deterministic: check the estimator's arithmetic exactly against the inputs it used,
  which the shim can log (each period's counted launches, count-phase launches and
  time, windowed launches: GPU_AGENT_DEBUG=2, or the audit file's per-window counts),
  and leave its statistical accuracy to bench/gpu; or run the mock's loop and the
  shim's schedule on one simulated clock (a test hook in the shim).
- test_windows::test_exp_toggle_alternates_attached_and_detached: attach and detach
  counts and the share of launches seen, in 3 s of 200:400 ms toggles on the wall
  clock (the share read 14.5 % once against a 15 % floor in a full suite, 17.5-20 % in
  8 runs beside two burners: the floor is 5 % now; the 55 % ceiling is the check).
  Deterministic: check them against the shim's own attached time (its attach lines
  carry their time now), not against fixed bounds.
- test_intervals: test_each_interval_holds_the_launches_made_in_it and
  test_a_stop_loses_nothing (a paced loop, idle 300 ms in every second, its launches
  per 2 s interval split by the spans' shapes, and up to a
  SIGTERM, against the loop's own log; counted periods, so only the pacing and the
  stop's timing move them). Deterministic: the loop's launches by count, the stop at
  a launch count the shim is told of. The first failed once in CI (2026-12-03, one
  worker): one edge's intervals -1.09 % and +1.20 %. Reproduced by stopping the loop
  (SIGSTOP) 30 ms every 0.37 s: pairs up to 1.5 %. Its poller stops with it, and the
  burst that catches up the pacing is spread over the stop. Each interval is now
  judged beyond the launches its edges' stops could move (support/windows.stall_slack:
  none without a stop; 6 runs with stops of 20-30 ms pass, spread by time still fails
  at 4.7-10.6 %). test_a_short_process_is_counted_whole was
  made deterministic: it checks the profile against the shim's own period lines
  (GPU_AGENT_DEBUG=2), not the loop's truth (-21.6 % once beside two burners); its
  first period's correction is bounded (at most 300 ns a launch), not required to
  be none: whether the first tail ended before the period did is the host's timing
  (one full run read exactly the 300 ns cap). Its last check, the profile against
  the loop's truth within a factor of 2 ("the order of magnitude, whatever the
  load"), failed once in a three-worker suite on the AMD VM (2026-12-02, [clocks]:
  196 800 seen of 500 001 made, the shim's periods agreeing with the profile): the
  busy clock's rest-of-period rate under that load. Not yet re-derived. test_idle_parts_of_a_period_add_nothing and
  test_a_process_idle_at_the_attach_is_counted_whole: a loop's launches per period or
  whole against its own log, on the busy clock (the loop's CPU time per launch is
  fixed, --work-ns, so a busy host moves only where its periods fall). A period's truth
  is the bracket of the log's lines each side of its edges (launches certainly and
  possibly inside): interpolated between two lines, a loop preempted there put up to
  1 000 launches on the wrong side, and a two-worker suite read the counter's 90th
  percentile at 2.34 % against 2 %. Beside two burners, against the bracket: counted,
  12 runs, median 0, 90th percentile 0.008-0.029 % (bound 0.1 %); the busy clock, 20
  runs, median 0.1-3.0 % (bound 5 %), 90th percentile 2.6-7.2 % (bound 10 %), and its
  first judged period 7.7 s into the loop once (no longer bound to 3 s: when a count
  phase first catches the thread busy is the host's scheduling).
  A period after a window-less one (any gap between the period lines' spans: a loaded
  host makes 36 ms ones) may hold that one's launches and is left out.
- test_launch_counter: test_a_rate_that_moves_between_count_phases_is_counted,
  test_a_launcher_that_holds_the_driver_s_pointer_is_counted,
  test_a_period_whose_slots_grew_counts_each_side_on_its_own (its counted periods within
  5 %; the clocks' periods before the growth, beside two burners -6 to +17 %, are not
  judged there),
  test_the_pointer_is_found_where_seccomp_refuses_process_vm_readv,
  test_a_process_end_adds_nothing and test_a_detach_puts_the_slots_back set counted
  launches against a loop's trace or its launches made; the attach (and the toggled detaches) fall where the host's
  scheduling puts them, and the trace's lines every 1 000 launches bound a period's
  truth. Deterministic: the mock's loop could write a line at each of the shim's
  period edges (the shim's own span), so that truth and estimate share their edges.
- test_mix_cuts: test_each_side_of_a_change_gets_its_own_kernels and
  test_without_cuts_a_period_takes_one_side (a paced loop that changes its launch
  path every 2 s, two copies at once, per 1 s interval against the loop's trace: the
  poll that sees a change comes when the host schedules the poller, and the windows
  fall at random slots; the cuts, of 6 turns, 3-6 in 14 loops beside two burners and 2
  in a loaded two-worker run: at least one is asked, 0.2 ** 6 by chance). Deterministic:
  the loop's turns by launch count, and the judgement against the shim's own cut times.
- tests/faults/test_http_peers: test_a_full_socket_table_costs_a_loopback_peer_nothing
  (200 loopback peer lookups timed with a full socket
  table against the same before it, in the same run (the kernel's exact lookup costs
  the same either way; the scan it replaced grew 27 x)).
Beside another pytest worker (three-worker suite, this project's 2-core AMD VM,
2026-12-02, 550 s, 2 failed):
- test_discover::test_session_discover_dedups_and_rejects_other_builds counted the
  session's attached shim files against every file discover() returned, which may
  include a parcagpu library another worker's test maps at the time (read 2 against
  3). Fixed at its cause: it counts the shim files it found (source "shim").
- faults/test_parcagpu_sites::test_a_library_with_hundreds_of_sites_is_refused_and_honest_ones_still_attach
  waited 30 s for "also watching parcagpu library" and saw only test_discover's copy
  attached. Not reproduced: 3 runs of both modules on two workers at once passed.
  Not yet explained.
Beside two other workers (`-n 3` over seven agent modules, this VM, 2026-12-03: 2 of
54 failed in one run of two):
- test_intervals::test_a_rare_kernel_keeps_its_stack_in_every_interval put all of the
  rare kernel's time under [unsampled] in every interval: its first launch inside a
  window is its one sure sample (callbacks.cpp's seen set), and none of its later ones
  (1 in 64 inside windows) was drawn. 4 of 4 pass beside two burners; its message now
  holds the agent's last lines. Not yet explained.
- test_launch_counter::test_a_pointer_dlsym_gives_after_the_attach_is_counted_from_its_first_launch
  (on the list below; its message was lost).
A full three-worker suite the same day (564 s) failed two:
- test_intervals::test_idle_parts_of_a_period_add_nothing[busy-clock]: 90th percentile
  13.1 % against 10 % (11.6 % once the day before). Beside two pytest neighbours, 8
  runs read 4.1-5.8 % (median 0.1-1.0 %): the full suite's load is heavier than that.
  Beside three (fifth session, support/measures.py): 14 runs 2.2-6.3 % (mean 3.75, sd
  1.3); in three-worker suites 4.0 and 7.7 % (both passed). Three neighbours still
  load it less than a suite. Not re-derived: no distribution at the failing load yet.
- faults/test_python_frames::test_a_thread_list_pointing_past_user_memory_leaves_the_agent_up
  read the honest job's samples 2.5 s after its exit, before the agent's stop: 4 623
  of 5 555 launches. CHANGED HERE: read after the stop (every held interval written).
And the next three-worker suite (486 s, at ce306ec) failed two others:
- test_launch_counter::test_a_period_whose_slots_grew_counts_each_side_on_its_own[half-before]
  found no "launches more for the period" line (the grown period's hits after the
  growth waited for no calibration: where the growth fell against the period's edges
  is the host's scheduling). Not yet explained.
- test_trace_viewers::test_speedscope_opens_the_recorded_chrome_trace_on_a_gpu_stream_and_aggregates_kernels:
  its `record` of the graph workload wrote no sample at all (samples=0 drops=0). Not
  reproduced. A likely way: `record` reaped its command (child.poll()) while the
  agent's attach-notes thread had not yet handled the command's note; the collector's
  included() decides a pid it meets first by whether /proc/PID exists, so a note
  handled after the reap left the command out whole, and nothing counts that.
  CHANGED HERE: `record` waits for its command with waitid(WNOWAIT) and reaps it only
  after the profile is written, so its pid and /proc stay the command's.
A one-worker CI run (2026-12-03, stop 65) failed test_budget's slow windows (below).
A three-worker suite at 06b8ccc (561 s, fifth session) failed two:
- test_launch_counter::test_a_period_whose_slots_grew_counts_each_side_on_its_own[two-in-a-row]
  found no row with slots added, its rows 1.1-1.6 s apart: a period whose window did
  not open prints no period line (its launches join the one before), and the growths
  fell in such periods. CHANGED HERE: where the slots grew is read from the shim's
  own "slots grew at" lines, the rows after it from its time; a failure says the
  shim's period, window and growth lines. 0 in 4 runs beside three neighbours (the
  periods each had a window then).
- faults/test_published::test_forged_spans_and_marks_stay_the_attacker_s_own read the
  honest job's samples 4 s after the attacker (whose mark held the intervals) was
  gone, and found none. CHANGED HERE: read once the running node's profiles hold all
  its launches (Honest.assert_exact_once_written, 60 s at most), then exactly; and
  test_forged_drop_counts_are_refused_and_counted_as_implausible waits for its count
  (faultkit.counted) instead of settle(). 0 in 4 runs each beside three neighbours.
The next, at d325139 (559 s), failed two:
- test_windows::test_records_completing_periods_after_their_launch_keep_their_periods_weight:
  10 009 of 600 001 launches after the last window (none alone): the exit's partial
  period, its window not open, after a period with no launch at all (which publishes
  the pending one), has no record to stand for its launches, and the shim counts them
  apart (its periods a quarter window-less under that load). CHANGED HERE: the weights
  are judged on the launches less those (at most 5 %). The profile does not say so
  yet: only the shim's exit line does.
- faults/test_parcagpu_sites::test_a_library_with_hundreds_of_sites_is_refused_and_honest_ones_still_attach:
  30 s and no "not watching" line for the hostile library; the agent had said only
  that it watched test_discover's copy of the shim (as on 2026-12-02). The next suite
  (d91a637) failed it again, and Agent.where() said every agent thread idle: the line
  had been printed. The discovery pass prints its "also watching" and "not watching"
  lines back to back; the test's readline() took both from the pipe, returned the
  first, and its select() on the pipe never saw the second, held in the reader's
  buffer. Only a copy that another worker's test_discover maps at the time makes two
  lines in one pass. CHANGED HERE: support/agent.py's StderrLines reads a process's
  stderr in a thread, and every wait on an agent's line (Agent.wait_for_line) or the
  UI's (test_ui_store's bomb line, the same pattern) takes lines from it.
Then, at cd99ac3 and 0188ef9, two clean suites (539 s, 556 s). The next at 0188ef9
(529 s) failed one:
- test_budget::test_the_window_grows_with_its_fixed_cost_and_the_spacing_keeps_the_budget:
  the cheap windows' fixed cost read 13.15 ms (bound 20), so a 131 ms window (bound:
  exactly 100) every 2.49 s: their stalls are timed on the wall clock, and a loaded host
  stretches them. CHANGED HERE: the cheap plan follows the same rule (ten times its
  fixed cost, at least 100 ms) and stays below the dear one (30 + 30 ms stalls: half
  its fixed cost, a shorter window, closer together); support/measures.py notes both.
The last suite of the fifth session (at 7bd3bed, 549 s) failed two, neither fixed:
- test_launch_counter::...[half-before]: no "launches more" line. The grown period had
  its window; the slots grew 21 ms before its end (30125.6206 s in the period ending
  30125.6413 s), so few hits came after the growth. Whether none did, or the line is
  not printed for a few, is not yet read from window.cpp.
- faults/test_cold_names::test_names_a_process_hands_over_cold_are_bounded_and_counted:
  (named, refused, lost) = (0, 0, 0). /metrics was read 2 s after the attacker's exit
  (a sleep standing for an event), and the profiles after the stop held no name of it
  either. Alone, after the change to StderrLines, it passed. Not explained.
`make flaky FLAKY_NEIGHBOURS=2` (flaky.py --neighbours) runs each test beside two pytest
processes that run other agent modules over and over (NEIGHBOUR_MODULES, never the
test's own), started NEIGHBOUR_START_S before it: a three-worker suite's load, with its
agents, eBPF, mock loops and clang, which two CPU burners are not.
Random samples:
- test_windows::test_reused_correlation_ids_do_not_join_stale_samples: the shim
  samples one launch in 64 at random (seeded from the clock and the thread,
  callbacks.cpp); joins within 30 % of launches/64, and the 3:1 call-site split
  within 5 %. Deterministic: a seed knob in the benchmark build (GPU_AGENT_EXP_*),
  and the exact counts that seed gives.
- test_parcagpu::test_rate_limited_parcagpu_keeps_unsampled_time: pglike's token
  bucket samples by time (100 a second), so the per-site split and the sampled share
  (< 2 % of launches: the run must last under about 16 s) follow the CPU's gaps. site_b
  read 21.7-26.2 % beside two burners, 9.3 % in a loaded two-worker run and 60 % on a
  CI host (3:1 launched), so the bound is a sample of each site (about 135 in all: no
  sample at 9.3 % is 0.907 ** 135 < 1e-4). Deterministic: pglike says which launches it
  sampled per site, and the test compares the profile's stacks with those counts.
- test_parcagpu::test_names_in_pages_bpf_cannot_read_are_read_by_the_agent,
  test_parcagpu::test_parcagpu_pc_samples_under_their_kernels_stacks_with_lines and
  test_python_stacks::test_a_job_that_ends_while_native_symbols_load_keeps_its_python_frames:
  the agent reads names and code objects from a live process. The first job lived
  1 s past its records' flush (a loaded run read them after the exit), and beside two
  pytest neighbours (--neighbours, 2026-12-03) one kernel's name was lost even so:
  CHANGED HERE, it lives until the agent's profiles hold all its launches (pg_sites'
  PG_SITES_LINGER_UNTIL, 60 s at most), an event, not a duration. The PC-sample
  job 2 s past its loop (a CI run put all 400 000 samples under <python code>
  frames; an agent stopped 0.8 s after the go until the exit does so every time, and
  python_unnamed_frames on the status line says so); in the last, a
  reused code object lives 50 ms after its launch, and may read as a placeholder (never
  another's name); its callers and the other stacks must be named.
- faults/test_trace_flood::test_a_flood_into_a_trace_keeps_its_memory_flat: the flood
  went 3 s after the trace's programs loaded, standing for "it captures". CHANGED
  HERE: `trace` says "capturing" once its trace mode and deadline are set, the test
  fires then, and every record must be told (the ring's 1 000, ring_oldest,
  trace_ringbuf: 2 047 000 exactly, in 3 runs beside two burners and a quiet one);
  before, a three-worker suite saw 66 584 go through the ring against 100 000, and two
  burners made the whole flood come before the capture.
- test_teardown::test_a_detach_leaves_nothing_behind: the launches that pay CUPTI's
  residual are those between each detach and its teardown's end, which the host's
  load stretches (beside two burners 1 105-3 692 in 6 runs; bound 1 % of 600 000 now,
  was 0.5 %). Deterministic: the shim logs each detach's launches up to its
  finalize, and the residual is checked against their sum.
- test_teardown::test_another_cupti_client_between_windows_is_named_and_waited_for: its
  residual's whole (under 1 %) held the launches of a paced loop during the windows'
  last flushes, whose length the load sets (9 250 of 600 000 once in a three-worker
  suite; 0-3 866 in 18 runs three at once beside a CPU burner). CHANGED HERE: judged
  outside the flushes, as the closed loop's test judges it, in blocks of 100 (22-292
  in 24 such runs; bound 100 a window, about 2 200).
- test_parcagpu::test_names_in_pages_bpf_cannot_read_are_read_by_the_agent also
  failed once in a three-worker suite waiting for "also watching parcagpu library"
  (discovery under load; not changed).
- test_parcagpu::test_parcagpu_pc_samples_wait_for_kernel_records_that_come_profiles_later:
  samples drained during the loop wait for records that come at the exit, 1.5 s after
  it. CHANGED HERE: they wait HOLD_S (30 s: pc_samples.py) or until the exit, not
  three profiles, which at 1 s intervals a three-worker suite outran once (384 000 of
  400 000 samples under [unsampled]).
- test_windows::test_outside_windows_nothing_is_collected_and_the_estimate_is_right and
  the edge test's unseen records: a tail's records read in another cycle took that
  window's last records' places (unseen and lost alike): delivered after the next
  window opened, or before their own window's records (CUPTI's worker and a flushing
  thread hand buffers over at once: 588 of 97 034 in a CI suite). And a poller
  preempted while it closed a window let launches be noted as the window's but not
  counted in it (lost 20-251 in 9 of 45 runs three at once beside a CPU burner).
  Its records against the share of time windows were open read 1.22 of it once in a
  three-worker suite (2026-12-03: 0.98-1.016 in 14 runs beside two burners): a loop
  whose pacing caught up inside windows. CHANGED HERE: set against the loop's own
  launches inside each window's open span (its log a line every 50 launches, the
  spans from a new debug line, window.cpp): -0.19 to +0.28 % in 21 runs, bound 1 %.
  CHANGED HERE (tail.cpp: by start times against the window's opening and closing,
  tests/shim_unit/tail_unit.cpp; window.cpp: the edge before the count): over 1 % in
  5 of 48 such runs at first, 1 of 24 with the opening alone, none of 48 now (unseen
  0-11, lost 0-4).
The budget's plan (test_budget): the exit line gives the LAST plan, and which costs
that plan had measured depends on when the periods fell:
- test_a_budget_the_floor_cannot_keep_is_said_and_counted: that plan may be one made
  before the first teardown was timed (on the switches alone);
- test_the_window_grows_with_its_fixed_cost_and_the_spacing_keeps_the_budget: the
  third period is planned with or without the first window's teardown;
- test_slow_windows_are_spaced_further_apart: the slowdown is a ratio of wall-clock
  launch rates (>= 40 % slowed, < 20 % not). A one-worker CI run (2026-12-03) read the
  loop without the added cost at 24.8 %: paced at 10 us a launch in blocks of 1 000
  (10 ms), a launch in a window under load had no time to spare, and a 100 ms window
  held 10 blocks +-1. CHANGED HERE: 20 us a launch in blocks of 100 (2 ms), 60 us
  added: alone 1.3-1.9 % against 68.1-68.7 % (3 runs); beside three neighbours
  0.5-1.5 % against 75.1-86.7 % (8 runs), periods 1.0 s against 5.9-6.9 s.
  Deterministic: the shim logs every plan with the costs it had measured
  (GPU_AGENT_DEBUG=2), and the test reads the first plan made with all of them.
Sleeps standing for an event:
- test_run::test_agent_killed_mid_run_app_finishes_normally: the agent was killed 1 s
  after the app started, attached or not. CHANGED HERE: it is killed once the shim
  says "attached (pid" (GPU_AGENT_DEBUG=1); on the list until runs under load show it.
- test_run::test_health_says_unhealthy_when_the_agent_stops_closing_windows: sleeps of
  3.5 s and 0.5 s against 1 s intervals decide "stuck", then "late". Deterministic:
  poll `health` until each answer, with a deadline, instead of sleeping.
- test_timeline::test_trace_pid_beside_run_is_continuous_for_that_process_only: 2 s
  for "both attached", 1 s for the capture to hold the lock, and window shares of
  wall time (< 13 %, > +5 %). CHANGED HERE: it waits for the shims' "attached" lines
  and for trace's loading line (the lock is held by then), not 2 s and 1 s. Waiting
  for "capturing" instead ran the second trace inside the capture: once, in a
  three-worker suite, it held 2 000 kernels against 2 400 (blocks of 1 000).
  Deterministic still to do: judge the shares by the shims' own counts.
- test_pcsampling::test_pc_sampling_survives_the_agent_restarting: the first agent is
  stopped 4 s after the workload starts and must hold PC samples by then.
  Deterministic: poll its output directory for a profile with PC samples. The
  workload runs until the second agent has watched it 6 s (a fixed 20 s ended before
  a first agent that let go 19 s after its stop, in a three-worker run).
- test_cli_errors::test_record_of_a_missing_command_fails_before_the_probes_load: the
  whole CLI, start to failure, in under 3 s of wall time. Deterministic: check that
  no probe was loaded (no BPF compile: e.g. bcc never imported), not the time.
- faults/test_flood::test_lost_records_are_each_process_s_dropped_launches (the
  launch flood; the name flood is in test_hostile_probes, next): the loss needs the
  flood to outrun a 1 MiB buffer pool, and settle() sleeps 2.5 s for the last
  windows. Deterministic: have the mock's CUPTI lose records on purpose (its null
  buffers), and wait for a profile written after both workloads exited. CHANGED
  HERE: the count it checks the profile against is the stop's last status line, once
  everything is read (off /metrics, held still 1.5 s, a three-worker suite missed 562
  of 4 878).
- faults/test_hostile_probes::test_a_name_flood_and_names_that_never_finish_stay_bounded:
  settle(node, 1.5) stands for "the honest workload's names are in and a window used
  them" before 75 MiB of names come; the flood is paced by sleeps. Deterministic:
  wait until a written profile names the honest kernels (Go pprof) before firing.
- test_late_events::test_a_short_process_whose_events_wait_is_named_with_its_frames:
  the attach notes' thread must read the process's maps within its 2 s life, which
  it does within ms unless starved of the CPU for seconds. Deterministic: have the
  workload wait, before it exits, for a file the test writes once the notes' count rose.
- faults/test_hostile_probes::test_attach_in_a_loop_costs_the_agent_little: the
  agent's CPU seconds (from /proc) over the flood, under 1.0 s where 0.09-0.10 s is
  read. Deterministic: count the attach events BPF sent (cnt_attach_repeats).
- faults/test_cubins::test_a_cubin_bomb_costs_a_child_not_the_agent: the intervals
  while a child parses the bomb, one after another, each under 1 s + WAIT_S + 0.5 s,
  read off the profiles' own spans once all are out (by file mtimes it failed in 2 of
  3 parallel runs: intervals are held until their periods are published). A
  three-worker suite read one of 5.55 s: its agent now watches a shim copy of its
  own with discovery off, so other workers' processes add nothing to its loop.
- faults/test_cubins::test_a_crc_sent_first_never_names_another_process_s_lines:
  each attacker's samples must find their cubin's lines, parsed by a child (a Python
  process that imports pyelftools) within the interval and the profile's WAIT_S (2
  s); once in a three-worker suite nobody's samples had none (the parse came later).
  Deterministic: parse in one long-lived child, started with the agent, or hold a
  sample whose parse runs for the next profile with its stacks.
The browser:
- test_ui_timeline::test_a_trace_past_the_old_cap_is_drawn_whole_and_in_detail: the
  highlight's check read the view counter, and the page asks one view at a time, so
  the reset's answer came first once in a three-worker suite (0 of 24 lit). CHANGED
  HERE: it waits until the info says 24 are lit (and the zoom until it says kernels).
- test_ui::test_click_into_a_kernel_frame_then_focus_and_hide: 700 ms waits for the
  flame graph's 300 ms transitions before each click (the hide step's click landed on
  the root once); the module's store splits its two phases by 2.5 s sleeps.
  Deterministic: app.js bumps a counter when a transition ends, as it does for
  renders, and the test waits for it; the store waits for an idle window's file.
The send queue (a unit test):
- test_export::test_auth_error_is_logged_once_and_not_retried_hot: 2 to 4 sends in a
  1.2 s sleep. Deterministic: give SendQueue a clock to inject, as it takes an rng.
CHANGED HERE and off the list: test_export's test_queue_backpressure_reports_full_without_dropping
waits for the first send instead of 50 ms, test_queue_drop_oldest_is_bounded_and_counts_every_drop
for two failed sends instead of 0.2 s. test_windows's
test_launches_before_any_window_are_counted had all four runs reach a window once in a
two-worker suite (1 in 2 000 by its quiet figures): it now runs processes until one
ends before its first window, 16 at most; and
test_launches_no_callback_sees_are_counted_and_weigh_n's N x the windowed records read
-17.2 % there (bound 25 % now; beside two burners -7.5 to 0 %). Read and left off:
test_windows's test_the_last_periods_launches_join_the_window_before_them (a window's
random place, but by its own figures it fails once in 2 000 runs or less; yet a
three-worker suite read -2.6 % once, 147 642 of 210 000 joined: about 26 of its one
window's ~1 000 records missing, each standing for 210 launches. Its loop starved in
the first period and then caught up (--warm 62000 --warm-rate 62000 does the same:
4 runs exact), so the joining holds; which records went is not found: a failure now
says the shim's exit lines), and the polls with deadlines
(test_drain_races, test_two_agents, test_bpf_session; support/shared_agent.py's wait
for a profile that holds its marker process, under test_windows), which wait for their
event. test_windows::test_audit_estimate_lands_on_the_full_trace_of_the_same_run's
"each record weighs about N" (within 20 %) read 6.12 at a window share of 16.3 % in a
two-worker suite: the weight is bounded as the share is now; and its "every kernel
sample says it is an estimate" failed in 2 of 16 runs beside two burners (an interval
whose rows all weigh 1 is exact, collector.py, and unlabelled: 545 of 600 000 launches
once): such samples may hold 5 % of the launches now, 0 failures in 8 runs. The workloads of
test_windows, test_launch_counter, test_teardown, test_budget, test_graphs and
test_intervals (but its paced run, whose agent's stop is the test) run under one
`gpu-agent run` a module now, not a `record` each: the same shim, windows and bounds.

Three-worker suites of 2026-12-03 (525 s and 484 s; the default stays one worker):
- test_shim_unit::test_agent_leaving_detaches_cupti: "FAKE finalize" came before the
  "detached" line: the launching thread finalizes at its next API exit, which can fall
  between the detach's unsubscribe and the poller's print of that line. CHANGED HERE:
  the finalize is checked after the unsubscribe and before the exit line, and once.
- test_run::test_health_says_unhealthy_while_profiles_are_dropped: no drop in 5 s. The
  fd limit was set once, at the lowest fd free then; an fd the agent held for a moment
  freed a place below it, and the writes took it. CHANGED HERE: the limit is set again
  at each look, for up to 30 s (the workload runs 60 s, killed at the end).
- test_streaming::test_parca_write_raw_end_to_end (every run under the BPF chunk
  chain, not a chance failure): a 2 s workload's two shim flushes (every 1 s from its
  attach) fell in one agent interval (every 1 s from the "watching" line, just before
  the workload starts). CHANGED HERE: it runs 3.5 s.
- test_intervals::test_a_short_process_is_counted_whole[clocks], in two suites: the
  profile 17 % and 28.9 % under the period lines plus the exit line's joined launches
  (0 in 12 runs beside two burners). The second failure's figures said why: the last
  period's est equalled the joined count. A period whose window saw no launch (the loop
  starved under load) is in its line and joined to the period before. CHANGED HERE:
  the profile is checked against the shim's "published" lines (weights.cpp), once each.
- test_ui_timeline::test_a_merged_nanotrace_shows_its_ctas_and_warps_under_the_stream:
  the fold's click said 2 rows while 8 in-kernel events were still drawn (the rows are
  set at the click, the drawn count at the next draw). CHANGED HERE: it waits for both,
  and after the unfold for all rows and the 8 events drawn again.
- test_k8s_e2e::test_pod_labels_on_profiles_and_metrics: a sample of a pod's exited
  process had no pod labels. k8s forgets a process a refresh (1 s here) after it saw
  it gone, and its last interval was built later. A defect, not the test's: a process's
  ProcInfo keeps its labels once complete (test_k8s's unit case fails without it).
- test_launch_counter::test_a_period_whose_slots_grew_counts_each_side_on_its_own
  [half-before], once in a one-worker suite (0 in 12 runs alone): a period said
  "slots added" and no "launches more" line came (its growth was not parted:
  window.cpp's ga_window_hook_grew leaves a growth at or before the period's start
  to the clocks, which the mock read +114 % for this loop). Not fixed; a failure now
  says the rows, the grown periods' lines and where the slots grew (a new debug line,
  window.cpp). 0 in 16 runs beside two burners and 4 alone (2026-12-03): the growths
  fell 0.26-0.40 s into 0.5 s periods; one found in the poll that ends its period
  still leaves a few hits after it, and their "launches more" line.
- test_ui_timeline's store fixture, once (4 errors): the record's timeline held no
  slice at all. Not found; a failure now says the record's stderr.

Three-worker suites, 2026-12-03 (third session): 534.0 s and 543.8 s clean; one at
a248950 (534.4 s) failed two, and one that a rebuild of the shim crossed failed more:
- test_windows::test_records_completing_periods_after_their_launch_keep_their_periods_weight:
  whole -0.84 % (bound 0.5 %); 0 in 4 runs beside two burners. Not re-derived.
- test_hostile_probes::test_forged_drops_of_many_processes_stay_within_each_interval_s_bound:
  its implausible count read 0 of 5 after a 2.5 s sleep. CHANGED HERE: waited for
  (faultkit.counted), as the others there.
- test_launch_counter::...[two-in-a-row] whole -4.2 % (bound 1 %) and
  test_intervals::test_idle_parts_of_a_period_add_nothing[busy-clock] p90 0.116 (bound
  0.1), both in the suite a rebuild crossed (its compile on both CPUs beside three
  workers); 0 in 5 runs each beside two burners.
- test_intervals::test_each_interval_holds_the_launches_made_in_it, once in a `-n 2`
  run of five modules (its message lost); 0 in 4 runs beside two burners and 5 alone.
- new: test_launch_counter::test_a_pointer_dlsym_gives_after_the_attach_is_counted_from_its_first_launch:
  its hits against the table's launches are exact; the whole run within 1 % depends
  on the period across the loop's start (0 in 4 runs beside two burners).

    python tests/support/flaky.py [--runs N] [--seconds S] [--burners B] [NODEID...]

Rounds of one run of each test (a pytest process of its own, no plugin that retries),
until N rounds or S seconds (default 3600: the whole thing stays within an hour; a run
the deadline cuts counts for nothing); then each test's failures per runs. Exit 1 if
any run failed. A failed run's output goes to build/flaky/.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (make flaky): tests/ holds `support`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import measures  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "build" / "flaky"

FLAKY: tuple[tuple[str, str], ...] = (
    (
        "tests/test_intervals.py::test_each_interval_holds_the_launches_made_in_it",
        "a paced loop's launches per 2 s interval against its own log; 1 % bound beyond a whole-process stop's slack",
    ),
    (
        "tests/test_intervals.py::test_a_stop_loses_nothing",
        "the profiles' sum up to a SIGTERM against the loop's log; 1 % bound (the shim hears of it within a poll)",
    ),
    (
        "tests/test_intervals.py::test_a_rare_kernel_keeps_its_stack_in_every_interval",
        "a rare kernel's first launch in a window is its one sure sample; all [unsampled] once beside two workers",
    ),
    (
        "tests/test_intervals.py::test_a_short_process_is_counted_whole",
        "the shim's own period arithmetic now (was: a 2 s loop against its truth, -21.6 % beside two burners)",
    ),
    (
        "tests/test_intervals.py::test_idle_parts_of_a_period_add_nothing",
        "each period of a loop busy/idle 0.35 s against its log: median under 5 %, worst under 20 % (seen: 1.6, 8.2)",
    ),
    (
        "tests/test_intervals.py::test_a_process_idle_at_the_attach_is_counted_whole",
        "a process idle 1.5 s at the attach, then busy 2 s, whole: 5 % bound (seen: -0.3 to +1.2 %)",
    ),
    (
        "tests/test_launch_counter.py::test_a_rate_that_moves_between_count_phases_is_counted",
        "counted launches per period vs the loop's trace: median 0.5 %, worst 5 % past two trace blocks (7.2 % raw)",
    ),
    (
        "tests/test_launch_counter.py::test_a_launcher_that_holds_the_driver_s_pointer_is_counted",
        "as the one above, through a pointer in the loop's data; hits over 95 % of the launches",
    ),
    (
        "tests/test_launch_counter.py::test_a_pointer_dlsym_gives_after_the_attach_is_counted_from_its_first_launch",
        "hits exactly the table's launches (deterministic); the whole run within 1 % (the period across its start)",
    ),
    (
        "tests/test_launch_counter.py::test_the_pointer_is_found_where_seccomp_refuses_process_vm_readv",
        "hits over 95 % of a loop's launches, the search reading /proc/self/mem",
    ),
    (
        "tests/test_windows.py::test_records_completing_periods_after_their_launch_keep_their_periods_weight",
        "whole within 0.5 %, records 150 ms late, gaps of 40 ms (-0.84 % once in a three-worker suite)",
    ),
    (
        "tests/test_launch_counter.py::test_a_period_whose_slots_grew_counts_each_side_on_its_own",
        "a lazy table found polls after it fills: counted periods within 5 % (11 runs beside 2 burners: none failed)",
    ),
    (
        "tests/test_trace_viewers.py::test_speedscope_opens_the_recorded_chrome_trace_on_a_gpu_stream_and_aggregates_kernels",
        "a graph workload's `record`: no sample at all once in a three-worker suite (not explained)",
    ),
    (
        "tests/faults/test_parcagpu_sites.py::test_a_library_with_hundreds_of_sites_is_refused_and_honest_ones_still_attach",
        "waited for a line by select() on a buffered pipe: missed one printed with another (StderrLines now)",
    ),
    (
        "tests/faults/test_cold_names.py::test_names_a_process_hands_over_cold_are_bounded_and_counted",
        "counts read off /metrics 2 s after the attacker's exit; (0, 0, 0) once in a three-worker suite",
    ),
    (
        "tests/faults/test_published.py::test_forged_spans_and_marks_stay_the_attacker_s_own",
        "the honest job's intervals, held by a forged mark, read before the stop (none 4 s after, once in a suite)",
    ),
    (
        "tests/faults/test_hostile_probes.py::test_forged_drop_counts_are_refused_and_counted_as_implausible",
        "the node's implausible count read off /metrics once counted (was 2.5 s after the attack)",
    ),
    (
        "tests/test_launch_counter.py::test_a_process_end_adds_nothing",
        "a 2 s loop whole against its launches: 0.5 % (seen: -0.11 to +0.01 %; the attach falls in its 0.3 s sleep)",
    ),
    (
        "tests/test_launch_counter.py::test_a_detach_puts_the_slots_back",
        "hits against launches, attached 200 ms in 600: 15 to 60 %; profile vs hits -20 to +10 % (-8.3 seen)",
    ),
    (
        "tests/test_mix_cuts.py::test_each_side_of_a_change_gets_its_own_kernels",
        "launches under the wrong kernel: 0.30-1.45 % in all (bound 4 %), no interval over 8.3 % (bound 30 %), "
        "15 runs beside 3 burners; a period ends within 0.5 s of each turn, each cut's window opens within 0.3 s",
    ),
    (
        "tests/test_mix_cuts.py::test_without_cuts_a_period_takes_one_side",
        "the same without cuts: 12-26 % in all (bound: over 8 %)",
    ),
    (
        "tests/faults/test_http_peers.py::test_a_full_socket_table_costs_a_loopback_peer_nothing",
        "200 peer lookups with 10 000 sockets in the table against the same before them: 3-5 ms for the 200 "
        "(bound 3 x + 50 ms; the scan it replaced: 0.16 s against 4.3 s)",
    ),
    (
        "tests/test_teardown.py::test_windows_leave_no_residual_and_the_estimate_holds",
        "EXTRAPOLATED (8 %) on launches extrapolated from 20 ms count phases, which a busy host's slices skew "
        "(its residual is judged outside the windows' last flushes, whose length the load sets: the mock counts "
        "the launches made during them)",
    ),
    (
        "tests/test_teardown.py::test_the_late_subscription_experiment_windows_without_loss_and_estimates",
        "EXTRAPOLATED (8 %), as above, with CUPTI subscribed only for the count phase",
    ),
    (
        "tests/test_windows.py::test_audit_estimate_lands_on_the_full_trace_of_the_same_run",
        "the share of launches in windows moves by up to 7 % under load; 3 % and 5 % bounds on the estimate",
    ),
    (
        "tests/test_windows.py::test_outside_windows_nothing_is_collected_and_the_estimate_is_right",
        "3 % on an estimate from the count phases of a paced loop",
    ),
    (
        "tests/test_windows.py::test_windows_that_slow_launches_do_not_bias_the_estimate",
        "the callbacks' cost timed by the windows' tails; 12 % and 9 % bounds (+7 % read on a 2-core VM)",
    ),
    (
        "tests/test_windows.py::test_launches_at_a_window_edge_are_not_the_windows[torn-down]",
        "5 % on count phases stalled 5 ms at each switch (-3.7 % read under a full suite)",
    ),
    (
        "tests/test_windows.py::test_reused_correlation_ids_do_not_join_stale_samples",
        "random stack samples: joins within 30 % of launches/64, the 3:1 site split within 5 %",
    ),
    (
        "tests/test_windows.py::test_exp_toggle_alternates_attached_and_detached",
        "attaches, detaches and the share seen, in 3 s of wall-clock 200:400 ms toggles",
    ),
    (
        "tests/test_periods.py::test_every_period_estimates_its_own_launches",
        "each period's estimate against the loop's launch log: median error under 10 %",
    ),
    (
        "tests/test_periods.py::test_a_free_count_piece_in_a_cycle_of_its_own",
        "a count piece at its latest place in each period (cycle-edge): 20 % a piece, median under 10 %",
    ),
    (
        "tests/test_budget.py::test_a_budget_the_floor_cannot_keep_is_said_and_counted",
        "the exit line's last plan may have been made before the first teardown was timed",
    ),
    (
        "tests/test_budget.py::test_the_window_grows_with_its_fixed_cost_and_the_spacing_keeps_the_budget",
        "which stalls the last plan had measured depends on when the periods fell",
    ),
    (
        "tests/test_budget.py::test_slow_windows_are_spaced_further_apart",
        "the slowdown is a ratio of wall-clock launch rates (>= 40 % slowed, < 20 % not)",
    ),
    (
        "tests/test_parcagpu.py::test_rate_limited_parcagpu_keeps_unsampled_time",
        "a token bucket samples by time: a sample of each site, and the sampled share (< 2 %)",
    ),
    (
        "tests/test_parcagpu.py::test_names_in_pages_bpf_cannot_read_are_read_by_the_agent",
        "the names are read from /proc/PID/mem while the job lives (until the profiles hold its launches)",
    ),
    (
        "tests/test_parcagpu.py::test_parcagpu_pc_samples_under_their_kernels_stacks_with_lines",
        "the job's Python code objects are read while it lives (2 s past its 400 launches)",
    ),
    (
        "tests/test_teardown.py::test_a_detach_leaves_nothing_behind",
        "launches between each detach and its teardown's end pay: the host's load stretches it",
    ),
    (
        "tests/test_teardown.py::test_another_cupti_client_between_windows_is_named_and_waited_for",
        "a paced loop's launches during the windows' last flushes pay; judged outside them now",
    ),
    (
        "tests/faults/test_trace_flood.py::test_a_flood_into_a_trace_keeps_its_memory_flat",
        "the flood fires once trace says it captures; every record told",
    ),
    (
        "tests/test_parcagpu.py::test_parcagpu_pc_samples_wait_for_kernel_records_that_come_profiles_later",
        "samples wait for records that come at the exit (HOLD_S, was three 1 s profiles)",
    ),
    (
        "tests/test_python_stacks.py::test_a_job_that_ends_while_native_symbols_load_keeps_its_python_frames",
        "code objects read while the job lives; a reused one lives 50 ms after its launch",
    ),
    (
        "tests/test_run.py::test_agent_killed_mid_run_app_finishes_normally",
        "killed 1 s after the app's start, attached or not (now: once the shim says it attached)",
    ),
    (
        "tests/test_run.py::test_health_says_unhealthy_while_profiles_are_dropped",
        "the fd limit at the lowest free fd, set again at each look, until health says dropped (30 s)",
    ),
    (
        "tests/test_run.py::test_health_says_unhealthy_when_the_agent_stops_closing_windows",
        "a sleep of 3.5 s against 1 s intervals decides 'stuck'; then 'late' once a window closes (polled, 10 s)",
    ),
    (
        "tests/test_timeline.py::test_trace_pid_beside_run_is_continuous_for_that_process_only",
        "sleeps for 'both attached' and for the capture's lock; window shares of wall time",
    ),
    (
        "tests/test_pcsampling.py::test_pc_sampling_survives_the_agent_restarting",
        "the first agent stops 4 s after the start and must hold PC samples by then; "
        "the job runs until the second has watched it 6 s",
    ),
    (
        "tests/test_cli_errors.py::test_record_of_a_missing_command_fails_before_the_probes_load",
        "the CLI's start and its one-line failure within 3 s of wall time",
    ),
    (
        "tests/faults/test_flood.py::test_lost_records_are_each_process_s_dropped_launches",
        "the flood must outrun a 1 MiB buffer pool; a 2.5 s sleep for the last windows",
    ),
    (
        "tests/faults/test_hostile_probes.py::test_a_name_flood_and_names_that_never_finish_stay_bounded",
        "a 1.5 s sleep stands for 'the honest names are in and used' before the name flood",
    ),
    (
        "tests/faults/test_cubins.py::test_a_cubin_bomb_costs_a_child_not_the_agent",
        "intervals one after another, none over 1 s + WAIT_S + 0.5 s, while a child parses the bomb",
    ),
    (
        "tests/faults/test_cubins.py::test_a_crc_sent_first_never_names_another_process_s_lines",
        "each attacker's samples get its own cubin's lines: the child's parse within the interval and WAIT_S",
    ),
    (
        "tests/test_ui.py::test_click_into_a_kernel_frame_then_focus_and_hide",
        "700 ms waits for the flame graph's transitions before clicks; the store's phases split by sleeps",
    ),
    (
        "tests/test_export.py::test_auth_error_is_logged_once_and_not_retried_hot",
        "2 to 4 sends counted in a 1.2 s sleep",
    ),
    (
        "tests/test_late_events.py::test_a_short_process_whose_events_wait_is_named_with_its_frames",
        "the attach notes' thread reads a 2 s process's maps while it lives (within ms when idle)",
    ),
    (
        "tests/faults/test_hostile_probes.py::test_attach_in_a_loop_costs_the_agent_little",
        "the agent's CPU over 1e6 attach probes under 1.0 s (0.09-0.10 s seen, 0.08 s for one attach)",
    ),
)


def burn(n: int) -> list[subprocess.Popen]:
    """n processes that spin on a CPU each, as other jobs on a CI host do."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


# --neighbours: the modules a three-worker suite runs beside a test (agents, eBPF, mock
# loops, clang): each neighbour runs one of them after another, over and over.
NEIGHBOUR_MODULES = (
    "tests/test_windows.py",
    "tests/test_teardown.py",
    "tests/faults/test_hostile_probes.py",
    "tests/test_timeline.py",
    "tests/test_launch_counter.py",
    "tests/test_periods.py",
)


NEIGHBOUR_START_S = 4.0


def neighbours(n: int, target_modules: set[str]) -> list[subprocess.Popen]:
    """n pytest processes that run NEIGHBOUR_MODULES (but the tested ones: xdist never
    runs a module twice at once) one after another until stopped, as the other
    workers of a three-worker suite do; their verdicts are not this run's."""
    mods = [m for m in NEIGHBOUR_MODULES if m not in target_modules]
    procs = []
    for i in range(n):
        order = " ".join(mods[i % len(mods) :] + mods[: i % len(mods)])
        loop = f"while :; do for m in {order}; do {sys.executable} -m pytest -q -p no:cacheprovider $m; done; done"
        procs.append(
            subprocess.Popen(
                ["sh", "-c", loop],
                cwd=REPO,
                env={**os.environ, measures.NEIGHBOURS_ENV: "-1"},  # its figures are not noted
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # a neighbour's pytest and its agents too
            except ProcessLookupError:  # a burner: no group of its own
                p.kill()
        p.wait()


def run_once(nodeid: str, timeout: float, near: int = 0) -> tuple[str, float, str]:
    """One pytest process for one test: (passed|failed|skipped|error|cut, seconds, output)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:rerunfailures", nodeid]
    t0 = time.monotonic()
    # A session of its own: at the deadline the run goes with whatever it started.
    env = {**os.environ, measures.NEIGHBOURS_ENV: str(near)}  # for the figures it notes
    p = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = p.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "cut", time.monotonic() - t0, out
    except BaseException:  # interrupted: the run goes too
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    secs = time.monotonic() - t0
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if p.returncode == 0:
        return ("passed" if re.search(r"\d+ passed", last) else "skipped"), secs, out
    return ("failed" if p.returncode == 1 else f"error (pytest exit {p.returncode})"), secs, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="runs of each test (FLAKY_RUNS)")
    ap.add_argument("--seconds", type=float, default=3600, help="the bound on the whole (default: one hour)")
    ap.add_argument("--burners", type=int, default=2, help="CPU-burning processes beside the tests")
    ap.add_argument(
        "--neighbours",
        type=int,
        default=0,
        help="pytest processes running other agent modules beside the tests (a three-worker suite's load)",
    )
    ap.add_argument(
        "--measures",
        action="store_true",
        help="print what the tests noted run after run (support/measures.py), and stop",
    )
    ap.add_argument("tests", nargs="*", help="node ids (FLAKY_TESTS; default: the list above)")
    a = ap.parse_args(argv)
    if a.measures:
        print(measures.summary())
        return 0
    tests = [t for arg in a.tests for t in arg.replace(",", " ").split()] or [t for t, _ in FLAKY]
    deadline = time.monotonic() + a.seconds
    print(
        f"make flaky: {len(tests)} test(s), {a.runs} run(s) each, within {a.seconds:.0f} s, "
        f"beside {a.burners} CPU burner(s) and {a.neighbours} pytest neighbour(s) on {os.cpu_count()} CPU(s)",
        flush=True,
    )
    runs = {t: 0 for t in tests}
    bad: dict[str, list[str]] = {t: [] for t in tests}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the burners go too
    burners = burn(a.burners)
    try:
        for r in range(1, a.runs + 1):
            for t in tests:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                near = neighbours(a.neighbours, {t.split("::")[0]})
                if near:
                    time.sleep(NEIGHBOUR_START_S)  # their agents up before the test's
                try:
                    verdict, secs, out = run_once(t, left, len(near))
                finally:
                    stop(near)
                if verdict == "cut":
                    print(f"[{r}/{a.runs}] {t}: cut at the deadline", flush=True)
                    continue
                runs[t] += 1
                line = f"[{r}/{a.runs}] {t}: {verdict} in {secs:.1f} s"
                if verdict not in ("passed", "skipped"):
                    LOGS.mkdir(parents=True, exist_ok=True)
                    log = LOGS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', t)}.{r}.log"
                    log.write_text(out)
                    bad[t].append(verdict)
                    line += f" (output: {log.relative_to(REPO)})"
                print(line, flush=True)
            if time.monotonic() >= deadline:
                print("make flaky: the time bound is reached", flush=True)
                break
    finally:
        stop(burners)
    reasons = dict(FLAKY)
    print("\nfailures / runs, each test:")
    for t in tests:
        print(f"  {len(bad[t]):3d} / {runs[t]:<3d} {t}" + (f"  ({reasons[t]})" if t in reasons else ""))
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
