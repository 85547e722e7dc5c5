"""Where closed windows go: every destination is a backend with one interface.

  local  one gzip pprof per window in a directory (local.py: LocalStore)
  parca  gRPC WriteRaw (parca.py) through a bounded send queue (RemoteBackend)
  otlp   gRPC ProfilesService/Export (otlp.py), likewise

commands/outputs.py builds each with make_backend and drives them alike through
ProfileBackend; /metrics reads them through the same methods.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol

from . import otlp, parca
from .endpoint import Endpoint, Transport, TransportOptions
from .local import LocalStore
from .queue import QueueStats, SendQueue

log = logging.getLogger("gpu_agent.export")


class ProfileBackend(Protocol):
    name: str  # "local", "parca", "otlp": its label on the status line and /metrics
    per_process: bool  # sends each process on its own: needs the window's per_pid profiles

    def describe(self) -> str:
        """Where it sends, for the start-up line: "into DIR", "to parca grpc://HOST:PORT"."""

    def has_room(self) -> bool:
        """False holds the window open (--queue-policy backpressure)."""

    def submit(self, window) -> Optional[Path]:
        """Ship one closed window (never raises); the file it went into, if it went into one."""

    def profile_counts(self) -> dict:
        """Windows by outcome, for gpu_agent_profiles_total."""

    def queue_stats(self) -> Optional[QueueStats]:
        """Its send queue, for gpu_agent_export_*; None when it has none."""

    def status(self) -> str:
        """Its part of the status line: " NAME=..." or ""."""

    def close(self, flush_timeout: float) -> None:
        """Flush what is queued for up to flush_timeout, count the rest as dropped."""


@dataclass
class QueueOptions:
    max_items: int = 32
    max_bytes: int = 64 << 20
    policy: str = "drop-oldest"
    backoff_initial: float = 0.5
    backoff_max: float = 30.0


@dataclass
class RemoteBackend:
    """A gRPC backend: encoder + transport + bounded send queue."""

    name: str  # "parca" or "otlp"
    endpoint: Endpoint
    encode: Callable  # (IntervalProfiles) -> bytes
    transport: Transport
    queue: SendQueue
    encode_failures: int = 0
    partial_rejections: dict = field(default_factory=dict)
    submitted: int = 0  # windows handed to it (queued, or lost encoding)

    per_process = True  # one series (parca) / resource (otlp) per process

    def describe(self) -> str:
        return f"to {self.name} {self.endpoint}"

    def has_room(self) -> bool:
        return self.queue.has_room()

    def submit(self, window) -> None:
        self.submitted += 1
        try:
            data = self.encode(window)
        except Exception as e:  # never let one bad window stop profiling
            self.encode_failures += 1
            log.error("%s: cannot encode a profile: %s: %s", self.name, type(e).__name__, e)
            return
        self.queue.put(data)

    def profile_counts(self) -> dict:
        # "sent" means handed to the queue; what the backend accepted is
        # gpu_agent_export_sent_profiles (queue_stats).
        return {"sent": self.submitted}

    def queue_stats(self) -> QueueStats:
        return self.queue.snapshot()

    def status(self) -> str:
        s = self.queue.snapshot()
        return f" {self.name}=sent:{s.sent},queued:{s.depth},dropped:{sum(s.dropped.values())}"

    def close(self, flush_timeout: float) -> None:
        self.queue.close(flush_timeout)
        self.transport.close()
        s = self.queue.snapshot()
        if sum(s.dropped.values()):  # what never reached the backend is said at exit too
            print(
                f"gpu-agent: {self.name}: {s.sent} sent, dropped "
                + ", ".join(f"{k}={v}" for k, v in sorted(s.dropped.items())),
                file=sys.stderr,
                flush=True,
            )


def make_backend(
    kind: str,
    target,
    topts: TransportOptions,
    qopts: QueueOptions,
    node: str,
    labels: dict,
    otlp_include_pprof: bool = False,
    max_store_bytes: int = 0,
) -> ProfileBackend:
    """kind "local": target is the directory (max_store_bytes bounds it, 0: no bound);
    "parca" / "otlp": target is the Endpoint (topts, qopts, node, labels apply)."""
    if kind == "local":
        return LocalStore(Path(target), max_store_bytes)
    return _remote_backend(kind, target, topts, qopts, node, labels, otlp_include_pprof)


def _remote_backend(
    kind: str,
    endpoint: Endpoint,
    topts: TransportOptions,
    qopts: QueueOptions,
    node: str,
    labels: dict,
    otlp_include_pprof: bool,
) -> RemoteBackend:
    transport = Transport(endpoint, topts)
    if kind == "parca":
        rpc = transport.unary(parca.METHOD, parca.response_deserializer)

        def encode(w):
            return parca.encode(w, node, labels)

        send = rpc
    elif kind == "otlp":
        rpc = transport.unary(otlp.METHOD, otlp.response_deserializer)
        backend_ref: list = []

        def encode(w):
            return otlp.encode(w, node, labels, include_pprof=otlp_include_pprof)

        def send(data: bytes) -> None:
            resp = rpc(data)
            ps = resp.partial_success
            if ps.rejected_profiles or ps.error_message:
                b = backend_ref[0]
                key = ps.error_message or "rejected"
                if key not in b.partial_rejections:
                    log.warning(
                        "otlp: the collector rejected %d profile(s): %s",
                        ps.rejected_profiles,
                        ps.error_message or "(no message)",
                    )
                b.partial_rejections[key] = b.partial_rejections.get(key, 0) + ps.rejected_profiles
    else:
        raise ValueError(kind)
    queue = SendQueue(
        f"{kind} {endpoint}",
        send,
        max_items=qopts.max_items,
        max_bytes=qopts.max_bytes,
        policy=qopts.policy,
        backoff_initial=qopts.backoff_initial,
        backoff_max=qopts.backoff_max,
    )
    b = RemoteBackend(kind, endpoint, encode, transport, queue)
    if kind == "otlp":
        backend_ref.append(b)
    return b
