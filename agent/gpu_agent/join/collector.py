"""The join of the agent: BPF aggregates + sampled stacks + names -> one pprof per interval.

Flow of one kernel (the five files to read):
  shim/src (CUPTI callback, sampled stack -> `cuda_correlation`; activity buffer ->
  `kernel_batch`) -> bpf/gpu_agent.bpf.c (join by (pid, correlation id), exact
  per-kernel totals) -> probes/bpf_session.py (drain maps) -> this module
  (join/estimator.py, join/stacks.py) -> profile/pprof.py.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Optional

from ..probes import contract as C
from . import estimator, invariants
from ..probes.bpf_session import BpfSession
from ..probes.devices import device_from_event, node_gpus
from ..probes.drain import Drain
from . import pc_samples, samples
from .placement import Placement
from .stacks import StackNames
from ..profile.pprof import FrameSpec, Numbering, ProfileBuilder
from ..system.procfs import read_comm
from ..profile.interval import Interval, IntervalProfiles, IntervalStats, ProcInfo
from ..symbols.demangle import demangle_kernel
from ..profile.vocabulary import (
    DROPPED_COMMENT,
    DROPPED_CUPTI,
    DROPPED_REFUSED_LABEL,
    DUTY_COMMENT,
    DUTY_LABEL,
    PARCAGPU_COMMENT,
    QUIET_COMMENT,
)

log = logging.getLogger(__name__)

INT64_MAX = (1 << 63) - 1


class Collector:
    """Owns the BPF session and everything needed to turn its maps into profiles.

    pid_filter decides which processes a profile includes (`record` keeps only
    its child's process tree); it is asked while the process is alive, on the
    first event from it, and its answer is remembered.
    """

    def __init__(
        self,
        shim_path: str,
        *,
        pid_filter: Optional[Callable[[int], bool]] = None,
        python_stacks: bool = True,
        ringbuf_mib: int = 0,
        whole: bool = False,
    ):
        # whole: one profile of everything, wherever its spans lie (`record`); else
        # rows are spread over the intervals their spans overlap (join/placement.py)
        # ringbuf_mib: a larger BPF ring buffer (a power of two), for timelines' events
        cflags = [f"-DGA_RINGBUF_PAGES={ringbuf_mib * 256}"] if ringbuf_mib else None
        self.session = BpfSession(
            str(shim_path), on_new_stack=self._on_new_stack, on_proc_exit=self._on_proc_exit, cflags=cflags
        )
        self.session.on_proc_attach = self._on_proc_attach
        self.session.on_attach_note = self._on_attach_note
        self.session.on_device = self.note_device
        self.session.on_published = self._on_published
        self.session.on_shape = lambda ev: self.placement.note_shape(
            ev.hdr.tgid, ev.start, ev.span_start_ns, ev.span_end_ns, ev.shares
        )
        self._marks: list[tuple[int, int, bool]] = []  # `published` probes not yet applied
        self._stopped_at: Optional[tuple[int, int]] = None  # let_go()'s (realtime, monotonic) ns
        self.pcs = pc_samples.PcSamples()  # opt-in PC sampling's samples, names and cubins
        s = self.session
        s.on_pc_batch, s.on_stall_reason, s.on_cubin = self.pcs.on_batch, self.pcs.on_stall_reason, self.pcs.on_cubin
        s.on_pg_pc = self.pcs.on_pg_pc
        # (pid, CUDA ordinal) -> probes.devices.GpuDevice, and pid -> CLOCK_REALTIME - CUPTI clock,
        # from the shim's gpu_device probes
        self.devices: dict = {}
        self._clock_offsets: dict[int, int] = {}
        # Stacks named: native and Python frames, once per stack, ahead in a thread.
        self.stacks = StackNames(self.session, python_stacks)
        self.pid_filter = pid_filter
        self.procs: dict[int, ProcInfo] = {}
        self._included: dict[int, bool] = {}
        self.placement = Placement(time.time_ns(), time.monotonic_ns(), whole=whole)
        # Called with every Drain, before it is placed (/metrics counts from the very
        # same data the profiles are built from).
        self.drain_listeners: list[Callable[[Drain], None]] = []
        self._exited_at: dict[int, int] = {}  # pid -> CLOCK_MONOTONIC ns of its exit
        self.exit_listeners: list[Callable[[int], None]] = []
        self._impossible = 0  # records invariants.py kept out, in all
        self._attached: set[int] = set()  # attached processes, until forgotten after their exit
        self._attached_now: set[int] = set()  # of those, attached in the current interval
        self._after_drain = False  # drain()'s second poll: exits wait (drain())
        self._late_exits: list[int] = []
        self._counters_at_interval: dict[str, int] = {}
        self._claims = invariants.DropClaims()
        self._carried = estimator.CarriedStacks()  # each kernel's stacks where it was last sampled
        # Lost records of each interval within its bound (invariants.bound_drops): the
        # node's drop_cupti sums what was kept; the claims past it, one each for the
        # node's drop_implausible, and by tgid (cumulative, like BPF's drop_implausible
        # map) for the profile's note.
        self._drops_kept = 0
        self._drops_refused_claims = 0
        self._drops_refused: dict[int, int] = {}
        self._node_gpus = node_gpus()  # the most GPUs a process is given credit for
        # Every interval's profiles number frames alike (pprof.Numbering): a reader of
        # many intervals resolves each frame once.
        self._numbering = Numbering()

    @property
    def interval(self) -> Interval:
        """The open interval (the one new rows without a span go to)."""
        return self.placement.current

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None:
        self.session.open()
        self.stacks.start()

    def close(self) -> None:
        self.stacks.stop()
        self.session.close()

    def poll(self, timeout_ms: int) -> None:
        self._apply_late_exits()
        self.session.poll(timeout_ms)
        self.stacks.python.retry_due()

    def drain(self) -> None:
        """Move what BPF aggregated so far into the current interval.

        Ring-buffer events are handled before and after: the kernel names sent
        before their records (and exits) must be known when the interval's profile
        is built (on an H200, a first interval after seconds of symbolizing read
        "[unknown kernel]"). A probe sends a name before it adds a record, and the
        drain waits for every probe under way: the second poll gets a name sent
        during the first. An exit it reads waits for the next poll: that process's
        last records may be in the next drain, and need its name, maps and pod."""
        self._apply_late_exits()
        self.session.poll(0)
        # Published marks heard before the maps are read: their records are in this drain.
        marks, self._marks = self._marks, []
        d = self.session.drain()
        # Lost records: one row a process, placed where drained, no GPU time of their own.
        d.totals, d.sampled = invariants.sanitize_dropped(d.totals, d.sampled)
        self.session.names.drained({k.kernel_id for k in d.totals})
        self._after_drain = True
        try:
            self.session.poll(0)
        finally:
            self._after_drain = False
        if self.drain_listeners:
            # Lost records go to the listeners (/metrics) once their interval has
            # bounded them (_profiles_of); the rest as drained.
            heard = Drain(
                {k: v for k, v in d.totals.items() if not invariants.is_dropped(k)}, d.sampled, d.counters, d.latency
            )
            for fn in self.drain_listeners:
                fn(heard)
        self.placement.place(d.totals, d.sampled)
        self.placement.note_published(marks)

    def _on_published(self, ev) -> None:
        self._marks.append((ev.hdr.tgid, ev.until_ns, bool(ev.final)))

    def let_go(self, timeout_s: float = 3.0) -> int:
        """A stop: the attach semaphore drops, and every shim that no other agent
        holds publishes what it holds (its last partial period at its last rate);
        waits for them, at most timeout_s. Returns how many did not say they were
        done (another agent keeps them attached, or they hung)."""
        self._stopped_at = (time.time_ns(), time.monotonic_ns())  # the last interval ends here
        self.placement.stop(self._stopped_at[1])
        self.session.let_go()
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll(50)
            self.drain()
            if not self.placement.published or time.monotonic() >= deadline:
                return len(self.placement.published)

    def close_interval(self) -> None:
        """The open interval ends now (its profile goes once ready_profiles says so)."""
        self.drain()
        self.placement.close(*(self._stopped_at or (time.time_ns(), time.monotonic_ns())))
        self._stopped_at = None

    def holding(self) -> bool:
        """Closed intervals wait for their shims."""
        return len(self.placement.held) > 1

    def ready_profiles(self, per_pid: bool = False, final: bool = False) -> list[IntervalProfiles]:
        """The profiles of the closed intervals whose shims have all published past
        their end (or waited placement.MAX_HOLD_S; `final`: all), oldest first."""
        ready = self.placement.ready(time.monotonic_ns(), final)
        # the last one of a final call holds nothing back (PC samples: no next profile)
        out = [self._profiles_of(iv, per_pid, last=final and i == len(ready) - 1) for i, iv in enumerate(ready)]
        self._forget_exited()  # once every interval given out now is built
        return out

    def counters(self) -> dict:
        c = self.session.counters()
        c["drop_impossible"] = c.get("drop_impossible", 0) + self._impossible
        # Lost records as the profiles show them: each process's within its intervals'
        # bounds (BPF's own drop_cupti counts them unbounded, as they come, and the
        # timelines read that: session.counters()); the claims refused past them.
        c["drop_cupti"] = self._drops_kept
        c["drop_implausible"] = c.get("drop_implausible", 0) + self._drops_refused_claims
        # launches estimated for intervals already given out (added to a later one),
        # and for time before this agent started (not ours)
        c["agent_late_launches"] = self.placement.counts["late_launches"]
        c["agent_before_start_launches"] = self.placement.counts["before_start_launches"]
        # spans split by their shapes (the rest by time), and shapes that made no sense
        c.update({f"agent_{k}": v for k, v in self.placement.shape_counts.items()})
        c.update(self.pcs.counts)
        c.update({f"agent_{k}": v for k, v in self.stacks.counts.items()})
        c.update(self.stacks.python.counters())
        return c

    # -- events (called from session.poll) ---------------------------------
    def _see(self, pid: int, comm: str = "") -> Optional[ProcInfo]:
        """The process's ProcInfo, made at its first sight; comm: its name as its
        attach event carried it (BPF read it then: the pid may be gone, or already
        another process's, by the time this agent reads /proc), else /proc's."""
        info = self.procs.get(pid)
        if info is not None and comm and info.comm == "?":
            info.comm = comm  # first seen by a launch, once gone, before its attach event
        if info is None:
            info = ProcInfo(pid, comm or read_comm(pid))
            self.procs[pid] = info
            info.pod  # reads /proc/PID/cgroup now, while the process exists (k8s caches it)
            if self.pid_filter is not None and pid not in self._included:
                # (its attach note may have decided while it lived: a gone process's
                # ancestry cannot be read, and `record` would leave it out)
                self._included[pid] = bool(self.pid_filter(pid))
            self.stacks.snapshot(pid)
        return info

    def _on_new_stack(self, tgid: int, stack_id: int, start: int) -> None:
        self._see(tgid)
        self.stacks.new_stack(tgid, stack_id, start)

    def _on_attach_note(self, tgid: int, comm: str) -> None:
        """The notes thread (probes/attach_notes.py), as soon as tgid's shim attached:
        its maps, pod and Python stacks read now, while it lives (its attach event may
        come seconds later to a busy agent, after a short process is gone). Only for a
        pid this agent has not met: a dead one's state under a reused pid is left to
        the attach event (_on_proc_attach), which tells the two apart."""
        if tgid in self.procs or not self.included(tgid):
            return
        self.stacks.snapshot(tgid)
        ProcInfo(tgid, comm).pod  # the pod's labels, cached now (k8s)
        self.stacks.python.on_attach(tgid)

    def _on_proc_attach(self, tgid: int, comm: str = "") -> None:
        if tgid in self._late_exits:  # the pid is already another process's
            self._late_exits.remove(tgid)
            self._exit_now(tgid)
        old = self.procs.get(tgid)
        if old is not None and old.exited:
            # A new process was given a dead one's pid before the dead one's last
            # interval closed: its name, pod and maps are its own. (BPF keeps their
            # stacks apart by start tag; the dead one's rows take the new labels.)
            self._forget_caches({tgid})
        self._see(tgid, comm)
        self._exited_at.pop(tgid, None)
        self.placement.gone.discard(tgid)
        if self.included(tgid):
            self._attached.add(tgid)
            self._attached_now.add(tgid)
            self.stacks.python.on_attach(tgid)

    def note_device(self, ev) -> None:
        """A gpu_device probe: the device's identity, and the process's clock pair."""
        self.devices[(ev.hdr.tgid, ev.ordinal)] = device_from_event(ev)
        if ev.cupti_ns and ev.realtime_ns:
            self._clock_offsets[ev.hdr.tgid] = ev.realtime_ns - ev.cupti_ns

    def clock_offset(self, pid: int) -> int:
        """CLOCK_REALTIME minus the CUPTI clock of pid's records (0: not known)."""
        return self._clock_offsets.get(pid, 0)

    def _on_proc_exit(self, tgid: int) -> None:
        if self._after_drain:
            self._late_exits.append(tgid)
        else:
            self._exit_now(tgid)

    def _apply_late_exits(self) -> None:
        late, self._late_exits = self._late_exits, []
        for tgid in late:
            self._exit_now(tgid)

    def _exit_now(self, tgid: int) -> None:
        info = self.procs.get(tgid)
        if info is not None:
            info.exited = True
        self._exited_at[tgid] = time.monotonic_ns()
        self.placement.forget(tgid)
        self.stacks.python.on_exit(tgid)
        for fn in self.exit_listeners:
            fn(tgid)

    def included(self, pid: int) -> bool:
        if self.pid_filter is None:
            return True
        if pid not in self._included:
            # First sight of this pid is in the maps: decide now if it is still alive.
            self._included[pid] = os.path.exists(f"/proc/{pid}") and bool(self.pid_filter(pid))
        return self._included[pid]

    # -- profile -----------------------------------------------------------
    # -- kernel names: the one lookup that profiles, timelines and /metrics use --
    def kernel_name(self, kernel_id: int) -> Optional[tuple[str, str]]:
        """(demangled, mangled) name of a kernel id: DROPPED_CUPTI (mangled "") for
        the row of CUPTI's lost records; None while the shim's name has not come."""
        if kernel_id == C.KERNEL_DROPPED:
            return DROPPED_CUPTI, ""
        raw = self.session.names.lookup(kernel_id)
        if raw is None:
            return None
        mangled = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
        return demangle_kernel(mangled), mangled

    def kernel_name_or_unknown(self, kernel_id: int) -> tuple[str, str]:
        """kernel_name, or "[unknown kernel 0x…]" (mangled "") while it is not known."""
        return self.kernel_name(kernel_id) or (f"[unknown kernel {kernel_id:#x}]", "")

    def proc(self, pid: int) -> ProcInfo:
        """comm and pod labels of pid (looked up on first sight, cached until it exits)."""
        return self._see(pid)

    def build_profile(self) -> tuple[ProfileBuilder, IntervalStats]:
        """Close the current interval: returns its profile and stats, and starts a new one."""
        w = self.build_profiles()
        return w.profile, w.stats

    def build_profiles(self, per_pid: bool = False) -> IntervalProfiles:
        """Everything not given out yet, in one profile, now (`record`, tests); with
        per_pid, also one profile per process (one series per process)."""
        self.close_interval()
        out = self._profiles_of(
            self.placement.merged(self.placement.ready(time.monotonic_ns(), final=True)), per_pid, last=True
        )
        self._forget_exited()
        return out

    def _profiles_of(self, win: Interval, per_pid: bool, last: bool = False) -> IntervalProfiles:
        """A closed interval's profiles (with per_pid, one per process too); last: no
        profile follows it (the agent stops)."""
        now = win.end_ns
        stats = IntervalStats(waited_ns=win.waited_ns)

        # Processes whose shim collects in windows (one in N; shim/src/window.cpp): their
        # numbers are estimates, so their samples say so.
        duty = {k.tgid for k, v in win.totals.items() if v.weighted_launches != v.launches}
        comments = [DUTY_COMMENT] if duty else []
        wall_ns = max(1, now - win.start_ns)
        bad = invariants.impossible_streams(win.totals, duty, wall_ns)
        win_totals, stats.impossible_records = invariants.drop_streams(win.totals, bad)
        win_sampled, _ = invariants.drop_streams(win.sampled, bad)
        self._impossible += stats.impossible_records
        # Each process's lost records within the interval's bound, whether the profile
        # includes it or not (the node's counters count every process).
        gpus = self._gpus(win_totals)
        win_totals, drops = invariants.bound_drops(win_totals, wall_ns, gpus)
        self._note_drops(win_totals, drops)
        counters = self.counters()
        lost = invariants.drops_comment(counters, self._counters_at_interval)
        self._counters_at_interval = counters
        if lost:
            comments.append(lost)
        claimed = self.session.implausible_drops()
        for p, n in self._drops_refused.items():
            claimed[p] = claimed.get(p, 0) + n
        claims = invariants.DropClaims.comment(
            {p: n for p, n in self._claims.new(claimed).items() if self.included(p)},
            lambda p: self._see(p).comm,
        )
        if claims:
            comments.append(claims)
        stats.lost_said = bool(lost or claims)

        # BPF keys (AggKey): tgid, device, stream, graph, kernel, stack, capture stack,
        # graph flags, process start tag; totals carry stack 0. The estimator's keys
        # put the stack last.
        # Totals as whole-run estimates: exact unless the shim collects in windows.
        totals = {
            (*k[:5], k.capture_stack_id, k.graph_flags, k.start): v.estimated()
            for k, v in win_totals.items()
            if self.included(k[0])
        }
        stats.excluded_pids = len({k[0] for k in win_totals} - {k[0] for k in totals})
        sampled = {
            (*k[:5], k.capture_stack_id, k.graph_flags, k.start, k.stack_id): v
            for k, v in win_sampled.items()
            if self.included(k[0])
        }
        est = estimator.estimate(totals, sampled, self._carried)
        self._carried.keep(est.sampled_weights)
        stats.orphan_samples = est.orphan_entries
        stats.carried_kernels, stats.unsampled_kernels = est.carried_keys, est.unsampled_keys
        mean_ns = estimator.mean_kernel_ns(est.rows)
        if any(row.key[4] == C.KERNEL_DROPPED for row in est.rows):
            comments.append(DROPPED_COMMENT)
        if any(row.key[6] & C.AGG_PARCAGPU for row in est.rows):
            comments.append(PARCAGPU_COMMENT)
        if any(self.included(k[0]) for k in (*self.pcs.window, *self.pcs.held)):
            comments.append(pc_samples.COMMENT)
        # Attached processes with no kernel here: idle, or no window of theirs ended in
        # this interval (windows come up to 15 s apart; a window's records stand for
        # its whole period and come with the profile in which that period ends).
        # (An exited one counts in the interval it attached in: a short job between windows.)
        live = {p for p in self._attached if p in self._attached_now or not self._see(p).exited}
        quiet = {p for p in live if self.included(p)} - {row.key[0] for row in est.rows}
        self._attached_now = set()
        if quiet:
            comments.append(QUIET_COMMENT.format(n=len(quiet)))
        if self._numbering.full():
            self._numbering = Numbering()

        def new_builder() -> ProfileBuilder:
            return ProfileBuilder(
                period_ns=1,
                duration_ns=max(0, now - win.start_ns),
                time_nanos=win.start_ns,
                comments=comments,
                numbering=self._numbering,
            )

        builder = new_builder()
        out = IntervalProfiles(builder, stats)

        def add(tgid: int, info: ProcInfo, frames: list, ns: int, n: int, labels: dict, pcs: int = 0) -> None:
            builder.add(frames, ns, n, labels, pcs)
            if per_pid:
                pb = out.per_pid.get(tgid)
                if pb is None:
                    pb = out.per_pid[tgid] = new_builder()
                    out.procs[tgid] = info
                pb.add(frames, ns, n, labels, pcs)

        kernel_stacks: dict = {}  # (tgid, start, kernel) -> its rows' stacks: PC samples go there

        # The GPU time charted for a process's lost records: at most the interval on
        # each of its GPUs (honest kernels' time is not bounded so: concurrent streams).
        dropped_ns_left = {p: wall_ns * gpus.get(p, 1) for p in drops.kept}
        pids = set()
        for row in est.rows:
            if max(row.gpu_ns, row.launches) > INT64_MAX:
                # pprof values are int64: only sums of impossible records get here
                stats.impossible_records += 1
                self._impossible += 1
                continue
            tgid, device_id, _, _, kernel_id, _, _, start = row.key
            pids.add(tgid)
            info = self._see(tgid)
            if kernel_id == C.KERNEL_DROPPED:
                ns = min(round(row.launches * mean_ns.get(tgid, 0.0)), dropped_ns_left.get(tgid, 0))
                dropped_ns_left[tgid] = dropped_ns_left.get(tgid, 0) - ns
                labels = {"pid": str(tgid), "comm": info.comm, **info.pod}
                if tgid in drops.refused:  # claimed past the bound: kept to it, said here
                    labels[DROPPED_REFUSED_LABEL] = str(drops.refused[tgid])
                add(tgid, info, [FrameSpec.marker(DROPPED_CUPTI)], ns, row.launches, labels)
                stats.dropped_launches += row.launches
                continue
            name = self.kernel_name_or_unknown(kernel_id)
            if name[1] == "":
                stats.unnamed_kernels += 1
            gpu = self.devices.get((tgid, device_id))
            frames, labels = samples.kernel_sample(row, info, name, self.stacks, gpu, tgid in duty)
            add(tgid, info, frames, row.gpu_ns, row.launches, labels)
            kernel_stacks.setdefault((tgid, start, kernel_id), []).append(
                (frames, {k: v for k, v in labels.items() if k != DUTY_LABEL}, row.gpu_ns)
            )
            stats.gpu_ns += row.gpu_ns
            stats.kernels += row.launches
        stats.pc_samples = pc_samples.add_to_profile(
            self.pcs,
            kernel_stacks,
            self.kernel_name_or_unknown,
            lambda tgid: {"pid": str(tgid), "comm": self._see(tgid).comm, **self._see(tgid).pod},
            lambda tgid, frames, labels, n: add(tgid, self._see(tgid), frames, 0, 0, labels, n),
            self.included,
            lambda tgid: not last and not self._see(tgid).exited,
        )
        stats.processes = len(pids)
        stats.attached_without_kernels = len(quiet)
        stats.samples = sum(v.launches for v in sampled.values())
        return out

    def _gpus(self, totals) -> dict[int, int]:
        """Each process's GPUs in an interval: the devices of its records there and
        those its shim announced (gpu_device), at least 1, at most the node's."""
        devs: dict[int, set] = {}
        for k in totals:
            if not invariants.is_dropped(k):
                devs.setdefault(k.tgid, set()).add(k.device_id)
        for pid, ordinal in self.devices:
            devs.setdefault(pid, set()).add(ordinal)
        return {k.tgid: min(self._node_gpus, max(1, len(devs.get(k.tgid, ())))) for k in totals}

    def _note_drops(self, totals, drops: invariants.BoundDrops) -> None:
        """An interval's bounded lost records: into the node's counters, and to the
        drain listeners (/metrics) as the rows they were kept as."""
        self._drops_kept += sum(drops.kept.values())
        self._drops_refused_claims += len(drops.refused)
        for p, n in drops.refused.items():
            self._drops_refused[p] = self._drops_refused.get(p, 0) + n
        if self.drain_listeners and drops.kept:
            rows = {k: v for k, v in totals.items() if invariants.is_dropped(k)}
            for fn in self.drain_listeners:
                fn(Drain(rows, {}, {}))

    def _forget_exited(self) -> None:
        """Exited processes have been reported once more; drop their caches so memory
        stays flat: once no interval still held began before the exit, none holds a
        row of theirs (late rows go to the oldest held one), and every interval given
        out with theirs is built (ready_profiles builds several at once after a hold:
        forgotten after the first, the next read comm "?" and [stack unavailable], in
        the parallel suite)."""
        oldest = self.placement.held[0].mono_start
        exited = {pid for pid, info in self.procs.items() if info.exited and self._exited_at.get(pid, 0) < oldest}
        if not exited:
            return
        held = {k[0] for iv in self.placement.held for rows in (iv.totals, iv.sampled) for k in rows}
        gone = exited - held
        if gone:
            self._forget_caches(gone)
            self._claims.forget(gone)
            for pid in gone:
                self._drops_refused.pop(pid, None)
            self.session.forget_pids(gone)  # their map entries: memory stays flat

    def _forget_caches(self, pids: set[int]) -> None:
        with self.stacks.lock:
            for pid in pids:
                self.procs.pop(pid, None)
                self._exited_at.pop(pid, None)
                self.placement.gone.discard(pid)
                self._attached.discard(pid)
                self._included.pop(pid, None)
                self.pcs.forget({pid})
                self._clock_offsets.pop(pid, None)
                for key in [k for k in self.devices if k[0] == pid]:
                    del self.devices[key]
            self.stacks.forget(pids)
            self._carried.forget(pids)
