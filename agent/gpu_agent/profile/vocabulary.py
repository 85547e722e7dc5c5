"""The words a profile uses, in one place: the marker frames that stand where a
stack or a kernel is missing, the labels the agent adds, and the comments that
say how to read estimated or lost figures. The profile builder, the UI, /metrics
and the benchmarks read them from here."""

from __future__ import annotations

# The pprof filename of a kernel frame, in the [cuda] mapping.
CUDA_KERNEL_FILENAME = "CUDA_KERNEL"
# The comment that named a profile's Numbering in files written before NUMBERING_FIELD
# (`go tool pprof -top` printed it as a line of its own): "gpu-agent numbering <16 hex>".
NUMBERING_COMMENT = "gpu-agent numbering "
# The field that names it now: profile.proto has none, so a private field number, far
# past any profile.proto uses; pprof, Parca and every protobuf reader skip a field they
# do not know (profile/pprof.py writes it, the UI's numbered reader reads it).
NUMBERING_FIELD = 100_001

UNSAMPLED = "[unsampled]"
UNKNOWN_STACK = "[stack unavailable]"
# CUDA graphs (docs/graphs.md): a replayed kernel sits under this marker, above
# the stack of the code that captured (created) its node...
GRAPH_REPLAY = "[cuda graph replay]"
# ...or, when the node was created before the shim attached, under this one,
# above the replay site's sampled stack.
GRAPH_BEFORE_ATTACH = "[graph captured before attach]"
# A fixed value: the records' weights vary around N (shim/src/window.cpp), and a
# label value that moved with them would split every series.
DUTY_LABEL = "gpu_time_estimated"
# The markers of lost records: their values are estimates (the UI keeps the samples
# through them apart from measured GPU time). A process's launches whose records
# CUPTI lost (GA_KERNEL_DROPPED totals rows) are DROPPED_CUPTI.
DROPPED_PREFIX = "[dropped:"
DROPPED_CUPTI = f"{DROPPED_PREFIX} cupti]"
DROPPED_COMMENT = (
    f"{DROPPED_CUPTI} samples: launches whose kernel records CUPTI lost (no free "
    "buffer); their gpu_time is an estimate, the process's mean kernel time in the "
    "window times those launches"
)
# On a process's [dropped: cupti] sample: the lost records it claimed in the interval
# past what it could have lost (join/invariants.py's bound_drops), refused: the sample
# holds only those within the bound.
DROPPED_REFUSED_LABEL = "implausible_drops"
DUTY_COMMENT = (
    f"gpu_time and kernel_launches of samples labelled {DUTY_LABEL}=true are estimates: "
    "that process's shim collected in one time window of every N (planned under "
    "GPU_AGENT_OVERHEAD_BUDGET, or GPU_AGENT_DUTY_CYCLE) and counted each collected "
    "kernel about N times, "
    "corrected for how much the windows slowed its launches (the launches between "
    "windows are extrapolated from a count phase before each window)"
)
QUIET_COMMENT = (
    "{n} attached process(es) show no kernel in this profile: idle, or none of their "
    "collection windows ended in this interval (windows come up to 15 s apart under "
    "GPU_AGENT_OVERHEAD_BUDGET; a window's records stand for its whole period and come "
    "with the profile in which that period ends)"
)
# Label of graph kernels: where the graph was launched (replayed) from.
GRAPH_REPLAY_LABEL = "cuda_graph_replay"
PARCAGPU_COMMENT = (
    "source=parcagpu samples: parcagpu passes on the kernel records of only the "
    "launches it samples (by default 100 a second per thread), so their GPU time "
    "and launches are those kernels', not the process's"
)
