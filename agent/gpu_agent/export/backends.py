"""A configured backend: encoder + gRPC transport + bounded send queue."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from . import otlp, parca
from .endpoint import Endpoint, Transport, TransportOptions
from .queue import SendQueue

log = logging.getLogger("gpu_agent.export")


@dataclass
class QueueOptions:
    max_items: int = 32
    max_bytes: int = 64 << 20
    policy: str = "drop-oldest"
    backoff_initial: float = 0.5
    backoff_max: float = 30.0


@dataclass
class Backend:
    name: str                       # "parca" or "otlp"
    endpoint: Endpoint
    encode: Callable                # (WindowProfiles) -> bytes
    transport: Transport
    queue: SendQueue
    encode_failures: int = 0
    partial_rejections: dict = field(default_factory=dict)

    def submit(self, window) -> None:
        try:
            data = self.encode(window)
        except Exception as e:  # never let one bad window stop profiling
            self.encode_failures += 1
            log.error("%s: cannot encode a profile: %s: %s", self.name, type(e).__name__, e)
            return
        self.queue.put(data)

    def close(self, flush_timeout: float) -> None:
        self.queue.close(flush_timeout)
        self.transport.close()


def make_backend(kind: str, endpoint: Endpoint, topts: TransportOptions, qopts: QueueOptions,
                 node: str, labels: dict, otlp_include_pprof: bool = False) -> Backend:
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
                    log.warning("otlp: the collector rejected %d profile(s): %s",
                                ps.rejected_profiles, ps.error_message or "(no message)")
                b.partial_rejections[key] = b.partial_rejections.get(key, 0) + ps.rejected_profiles
    else:
        raise ValueError(kind)
    queue = SendQueue(f"{kind} {endpoint}", send, max_items=qopts.max_items,
                      max_bytes=qopts.max_bytes, policy=qopts.policy,
                      backoff_initial=qopts.backoff_initial, backoff_max=qopts.backoff_max)
    b = Backend(kind, endpoint, encode, transport, queue)
    if kind == "otlp":
        backend_ref.append(b)
    return b
