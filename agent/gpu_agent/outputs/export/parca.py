"""One window -> parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw.

One RawProfileSeries per process, labelled __name__ (gpu_time), node, pid,
comm, the pod labels where known (pod, namespace, container) and the user's
--label k=v; its one RawSample is that process's window as a gzip pprof (both
sample types: Parca shows gpu_time:nanoseconds and kernel_launches:count).
"""

from __future__ import annotations

import re
from typing import Mapping

from ...proto import parca_profilestore_pb2 as pb

METHOD = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"
PROFILE_NAME = "gpu_time"

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")


def valid_label_name(name: str) -> bool:
    """Parca (like Prometheus) accepts [a-zA-Z_][a-zA-Z0-9_]*; __* is reserved."""
    return bool(_LABEL_NAME.match(name)) and not name.startswith("__")


def series_labels(
    node: str, pid: int, comm: str, pod: Mapping[str, str], extra: Mapping[str, str], name: str = PROFILE_NAME
) -> list[tuple[str, str]]:
    labels = {"__name__": name, "node": node, "pid": str(pid), "comm": comm}
    labels.update({k: v for k, v in pod.items() if v})
    labels.update(extra)  # the user's --label wins over derived ones, never over __name__
    labels["__name__"] = name
    return sorted((k, v) for k, v in labels.items() if v != "")


def encode(window, node: str, extra: Mapping[str, str]) -> bytes:
    """window: profile.interval.IntervalProfiles built with per_pid=True."""
    req = pb.WriteRawRequest(normalized=True)
    for pid in sorted(window.per_pid):
        info = window.procs[pid]
        s = req.series.add()
        for k, v in series_labels(node, pid, info.comm, info.pod, extra):
            s.labels.labels.add(name=k, value=v)
        s.samples.add(raw_profile=window.per_pid[pid].to_bytes())
    return req.SerializeToString()


def response_deserializer(data: bytes):
    return pb.WriteRawResponse.FromString(data)
