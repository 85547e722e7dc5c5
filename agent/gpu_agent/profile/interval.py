"""What one profile interval holds: its aggregates (merged over drains), the
processes in it, and, once closed, its profiles and their figures. (A collection
window is the shim's; an interval is the agent's period between two profiles.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .pprof import ProfileBuilder


@dataclass
class ProcInfo:
    pid: int
    comm: str
    exited: bool = False
    _pod: Optional[dict] = field(default=None, repr=False, compare=False)

    @property
    def pod(self) -> dict:
        """pod/namespace/container where known (k8s.proc_labels; {} outside Kubernetes).
        Kept once complete (the container found), for as long as the process is this
        agent's: k8s forgets a process a refresh after it was seen gone, and its last
        intervals may be built later than that (under load; held for a shim's
        publication): they lost its pod (test_k8s_e2e, a three-worker suite)."""
        if self._pod is not None:
            return self._pod
        try:
            from ..system import k8s

            labels = k8s.proc_labels(self.pid)
        except Exception:  # metadata is best effort
            return {}
        if "container" in labels:
            self._pod = labels
        return labels


@dataclass
class Interval:
    """Aggregates drained from BPF over one profile interval: the rows placed in it
    (join/placement.py)."""

    start_ns: int  # CLOCK_REALTIME (the profile's time)
    totals: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)
    # Its bounds on CLOCK_MONOTONIC (the shim's spans' clock), its end on
    # CLOCK_REALTIME, once closed (join/placement.py); how long it waited past its end.
    mono_start: int = 0
    mono_end: Optional[int] = None
    end_ns: Optional[int] = None
    waited_ns: int = 0


@dataclass
class IntervalProfiles:
    """One closed interval: the node-wide profile and, if asked, one profile per process."""

    profile: ProfileBuilder
    stats: "IntervalStats"
    per_pid: dict = field(default_factory=dict)  # pid -> ProfileBuilder
    procs: dict = field(default_factory=dict)  # pid -> ProcInfo (as of this interval)


@dataclass
class IntervalStats:
    processes: int = 0
    kernels: int = 0
    gpu_ns: int = 0
    samples: int = 0
    unnamed_kernels: int = 0
    orphan_samples: int = 0
    # Kernels with no sampled launch here, split by their stacks of an earlier
    # interval (join/estimator.py CarriedStacks), and those left [unsampled].
    carried_kernels: int = 0
    unsampled_kernels: int = 0
    excluded_pids: int = 0
    impossible_records: int = 0  # kept out by invariants.py (also in drop_impossible)
    dropped_launches: int = 0  # launches whose records CUPTI lost ([dropped: cupti] samples)
    # Attached processes with no kernel in this interval: idle, or a job whose launches
    # fell between its collection windows (said, not hidden; the profile says it too).
    attached_without_kernels: int = 0
    # The profile says data was lost or refused (drop counters, implausible claims):
    # shipped even when it holds no kernel, so that every drop is said.
    lost_said: bool = False
    # PC samples put in the profile (shipped even without a kernel: samples whose
    # kernel's records never came go under [unsampled], not nowhere)
    pc_samples: int = 0
    # How long the interval waited past its end for its shims to publish (join/placement.py).
    waited_ns: int = 0
