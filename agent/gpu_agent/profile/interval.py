"""What one profile interval holds: its aggregates (merged over drains), the
processes in it, and, once closed, its profiles and their figures. (A collection
window is the shim's; an interval is the agent's period between two profiles.)"""

from __future__ import annotations

from dataclasses import dataclass, field

from .pprof import ProfileBuilder


@dataclass
class ProcInfo:
    pid: int
    comm: str
    exited: bool = False

    @property
    def pod(self) -> dict:
        """pod/namespace/container where known (k8s.proc_labels; {} outside Kubernetes)."""
        try:
            from ..system import k8s

            return k8s.proc_labels(self.pid)
        except Exception:  # metadata is best effort
            return {}


@dataclass
class Interval:
    """Aggregates drained from BPF over one profile interval (merged over drains)."""

    start_ns: int
    totals: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)

    def merge(self, drain) -> None:
        for dst, src in ((self.totals, drain.totals), (self.sampled, drain.sampled)):
            for k, v in src.items():
                old = dst.get(k)
                dst[k] = v if old is None else type(v)(*(a + b for a, b in zip(old, v)))


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
    excluded_pids: int = 0
    impossible_records: int = 0  # kept out by invariants.py (also in drop_impossible)
    dropped_launches: int = 0  # launches whose records CUPTI lost ([dropped: cupti] samples)
    # Attached processes with no kernel in this interval: idle, or a job whose launches
    # fell between its collection windows (said, not hidden; the profile says it too).
    attached_without_kernels: int = 0
    # The profile says data was lost or refused (drop counters, implausible claims):
    # shipped even when it holds no kernel, so that every drop is said.
    lost_said: bool = False
