"""Where `gpu-agent run` sends what it collects: a local pprof directory, Parca,
an OTLP collector, and Prometheus /metrics. The first three are backends with one
interface (export/backends.py), built and driven alike. One object, driven by
run's loop:

  outputs = Outputs(args, collector)   # flags -> backends, metrics server
  outputs.tick()                       # every loop turn: 1 s drains for /metrics
  outputs.window_due()                 # at each interval: close it, ship those ready
  outputs.ship_ready()                 # between: ship held intervals once their shims published
  outputs.close()                      # last window, flush queues, stop the server
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from .common import byte_size, dir_error, duration, positive_int

# Plaintext to these never leaves the host: a token may go there without TLS.
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _label(text: str) -> tuple[str, str]:
    from ..outputs.export.parca import valid_label_name

    k, sep, v = text.partition("=")
    k = k.strip()
    if not sep or not valid_label_name(k):
        raise argparse.ArgumentTypeError(
            f"invalid --label {text!r}: expected NAME=VALUE with NAME matching [a-zA-Z_][a-zA-Z0-9_]*"
        )
    return k, v


def add_arguments(p) -> None:
    g = p.add_argument_group("sending profiles to a backend (gRPC)")
    g.add_argument(
        "--remote-store",
        default=None,
        metavar="grpc[s]://HOST:PORT",
        help="Parca (or compatible) profile store: ProfileStoreService/WriteRaw",
    )
    g.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="grpc[s]://HOST:PORT",
        help="OpenTelemetry collector: profiles v1development ProfilesService/Export",
    )
    g.add_argument(
        "--otlp-include-pprof",
        action="store_true",
        default=False,
        help="also attach each process's gzip pprof as the OTLP profile's original_payload",
    )
    g.add_argument(
        "--bearer-token-file",
        default=None,
        metavar="FILE",
        help="send 'authorization: Bearer <token>' (file re-read when it changes)",
    )
    g.add_argument("--ca-file", default=None, metavar="FILE", help="CA bundle for grpcs:// (default: the system CAs)")
    g.add_argument(
        "--allow-insecure-token",
        action="store_true",
        default=False,
        help="send --bearer-token-file over plaintext grpc:// to a host other than this one (refused otherwise)",
    )
    g.add_argument(
        "--insecure-skip-verify",
        action="store_true",
        default=False,
        help="grpcs:// without verifying the server certificate (testing only)",
    )
    g.add_argument(
        "--label",
        action="append",
        type=_label,
        default=[],
        metavar="NAME=VALUE",
        help="extra label on every profile sent (repeatable)",
    )
    g.add_argument("--export-timeout", default=10.0, type=duration, help="deadline of one send (default 10s)")
    g.add_argument(
        "--queue-size",
        default=32,
        type=positive_int,
        help="profiles waiting per backend while it is slow or down (default 32)",
    )
    g.add_argument(
        "--queue-max-bytes", default=64 << 20, type=byte_size, help="bytes waiting per backend (default 64MiB)"
    )
    g.add_argument(
        "--queue-policy",
        default="drop-oldest",
        choices=("drop-oldest", "backpressure"),
        help="when the queue is full: drop the oldest profile (default), or stop "
        "reading the BPF maps and let them aggregate until it drains",
    )
    g.add_argument(
        "--retry-initial-backoff",
        default=0.5,
        type=duration,
        help="first retry delay; doubles per failure, with jitter (default 500ms)",
    )
    g.add_argument(
        "--retry-max-backoff",
        default=30.0,
        type=duration,
        help="longest retry delay, also the retry period after an auth error (default 30s)",
    )
    m = p.add_argument_group("Prometheus /metrics")
    m.add_argument(
        "--metrics-addr",
        default=None,
        nargs="?",
        const="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="serve /metrics (off by default; bare flag: 127.0.0.1:9464; a missing "
        "HOST means 127.0.0.1; 0.0.0.0:9464 listens on every interface)",
    )
    m.add_argument(
        "--metrics-token-file",
        default=None,
        metavar="FILE",
        help="every scrape must carry this file's token (Authorization: Bearer; Prometheus's "
        "authorization.credentials_file): root's or this user's, mode 0600 or 0400. Without it "
        "/metrics is open, as exporters are: give it on a host other users share, or beyond loopback",
    )
    m.add_argument(
        "--metrics-top-kernels",
        default=50,
        type=positive_int,
        help='kernels with their own label; the rest are summed as kernel="other" (default 50)',
    )
    m.add_argument(
        "--metrics-ttl",
        default=300.0,
        type=duration,
        help="how long series of exited processes and demoted kernels stay (default 5m)",
    )
    m.add_argument(
        "--metrics-drain-interval", default=1.0, type=duration, help="how often BPF is read for /metrics (default 1s)"
    )


def node_name(args) -> str:
    return getattr(args, "node_name", None) or os.environ.get("NODE_NAME") or socket.gethostname()


def _setup_logging() -> None:
    log = logging.getLogger("gpu_agent")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("gpu-agent: %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False


class Outputs:
    def __init__(self, args, collector):
        from ..outputs.export.backends import QueueOptions, make_backend
        from ..outputs.export.endpoint import TransportOptions, parse_endpoint

        _setup_logging()
        self.collector = collector
        self.node = node_name(args)
        labels = dict(args.label or [])
        remotes = [(k, v) for k, v in (("parca", args.remote_store), ("otlp", args.otlp_endpoint)) if v]
        # Every destination is checked before anything runs (the workload included),
        # then each becomes a backend the same way.
        destinations = []  # (kind, target) for make_backend, in this order
        # The local directory is the default only when no remote is configured.
        out_dir = args.output_dir
        if out_dir is None and not remotes:
            out_dir = Path("./profiles")
        if out_dir is not None:
            # A file, or a read-only or full directory: one line now, not a dropped first window.
            why = dir_error(Path(out_dir))
            if why:
                print(f"gpu-agent: error: --output-dir: {why}", file=sys.stderr)
                raise SystemExit(2)
            destinations.append(("local", Path(out_dir)))
        if args.bearer_token_file:
            try:
                with open(args.bearer_token_file, "rb"):
                    pass
            except OSError as e:
                print(
                    f"gpu-agent: error: --bearer-token-file: cannot read {args.bearer_token_file}: {e.strerror or e}",
                    file=sys.stderr,
                )
                raise SystemExit(2)
        topts = TransportOptions(
            ca_file=args.ca_file,
            insecure_skip_verify=args.insecure_skip_verify,
            bearer_token_file=args.bearer_token_file,
            timeout_s=args.export_timeout,
            reconnect_max_s=min(args.retry_max_backoff, 10.0),
        )
        qopts = QueueOptions(
            max_items=args.queue_size,
            max_bytes=args.queue_max_bytes,
            policy=args.queue_policy,
            backoff_initial=args.retry_initial_backoff,
            backoff_max=args.retry_max_backoff,
        )
        self.policy = args.queue_policy
        for kind, url in remotes:
            try:
                ep = parse_endpoint(url)
            except ValueError as e:
                raise SystemExit(f"gpu-agent: --{'remote-store' if kind == 'parca' else 'otlp-endpoint'}: {e}")
            if args.bearer_token_file and not ep.tls and ep.host not in LOOPBACK and not args.allow_insecure_token:
                print(
                    f"gpu-agent: error: {ep}: a bearer token over plaintext gRPC can be read on "
                    "the network: use grpcs://, or --allow-insecure-token",
                    file=sys.stderr,
                )
                raise SystemExit(2)
            destinations.append((kind, ep))
        self.backends = [
            make_backend(
                kind,
                target,
                topts,
                qopts,
                self.node,
                labels,
                otlp_include_pprof=args.otlp_include_pprof,
                max_store_bytes=getattr(args, "max_store_bytes", 0),
            )
            for kind, target in destinations
        ]
        self.metrics = None
        self._server = None
        self.metrics_url = None
        self.drain_interval = args.metrics_drain_interval
        self._next_drain = time.monotonic() + self.drain_interval
        self._stalled_since: Optional[float] = None
        # Windows that reached no backend; the backends count the ones they took.
        self._unshipped = {"empty": 0, "deferred": 0}
        self.last_health: Optional[dict] = None  # _health()'s last report
        if getattr(args, "metrics_token_file", None) and not args.metrics_addr:
            raise SystemExit("gpu-agent: --metrics-token-file needs --metrics-addr")
        if args.metrics_addr:
            from ..outputs import metrics as M

            def kernel_name(kid: int) -> Optional[str]:
                known = collector.kernel_name(kid)
                return known[0] if known else None

            self.metrics = M.Metrics(
                top_n=args.metrics_top_kernels,
                ttl_s=args.metrics_ttl,
                proc_info=collector.proc,
                kernel_name=kernel_name,
                device_info=lambda pid, dev: collector.devices.get((pid, dev)),
            )
            # A drain holds a windowed process's rows only once their period is
            # published (after it ended): a counter counts each process's launches up
            # to its last published period, with no interval's wait (README).
            collector.drain_listeners.append(self.metrics.on_drain)
            collector.exit_listeners.append(self.metrics.on_exit)
            for b in self.backends:
                self.metrics.add_exporter(b)
            try:
                self._server, _t, (host, port) = M.serve(
                    self.metrics, args.metrics_addr, getattr(args, "metrics_token_file", None)
                )
            except (OSError, ValueError) as e:
                raise SystemExit(f"gpu-agent: cannot serve /metrics on {args.metrics_addr}: {e}")
            self.metrics_url = f"http://{host}:{port}/metrics"

    def describe(self) -> str:
        parts = [b.describe() for b in self.backends]
        if self.metrics_url:
            parts.append(f"metrics on {self.metrics_url}")
        return ", ".join(parts)

    # -- the loop's hooks ----------------------------------------------------
    def blocked(self) -> bool:
        """Backpressure: a full queue stops reading BPF (windows stay open, maps aggregate)."""
        if self.policy != "backpressure":
            return False
        full = any(not b.has_room() for b in self.backends)
        if full and self._stalled_since is None:
            self._stalled_since = time.monotonic()
            logging.getLogger("gpu_agent.export").warning(
                "backpressure: a send queue is full; BPF maps aggregate in the kernel until it drains"
            )
        elif not full and self._stalled_since is not None:
            logging.getLogger("gpu_agent.export").warning(
                "backpressure released after %.1fs", time.monotonic() - self._stalled_since
            )
            self._stalled_since = None
        return full

    def tick(self) -> None:
        """Frequent drains for /metrics (the profile window keeps accumulating them)."""
        if self.metrics is None or time.monotonic() < self._next_drain:
            return
        self._next_drain = time.monotonic() + self.drain_interval
        if not self.blocked():
            self.collector.drain()
        self._health()

    def _health(self) -> None:
        """The agent's health, for /metrics and for the UI's status page (last_health:
        a new dict each time, read by the UI's threads without a lock)."""
        c = self.collector.counters()
        drops = {k[len("drop_") :]: v for k, v in c.items() if k.startswith("drop_")}
        for k in ("agent_ev_corrupt", "agent_ev_unknown", "agent_callback_errors"):
            if k in c:
                drops[k] = c[k]
        for k, v in c.items():  # names refused or evicted (names.py)
            if k.startswith("agent_drop_"):
                drops["agent_" + k[len("agent_drop_") :]] = v
        health = dict(
            attached_processes=sum(1 for p in self.collector.procs.values() if not p.exited),
            bpf_events=getattr(self.collector.session, "_events", 0),
            kernel_records=c.get("kernels", 0),
            sampled_launches=c.get("samples", 0),
            drops=drops,
            profiles=self.profile_counts(),
        )
        if self.metrics is not None:
            self.metrics.set_health(**health)
        backends = []
        for b in self.backends:
            q = b.queue_stats()
            backends.append(
                {"name": b.name, "counts": b.profile_counts(), "queue": None if q is None else dataclasses.asdict(q)}
            )
        self.last_health = dict(
            health, backends=backends, shims=self.collector.session.attached_files(), at=time.time()
        )

    def window_due(self, final: bool = False):
        """Close the interval, and ship every interval that is ready (its shims have
        published past its end: join/placement.py): [(stats, local path or None)];
        None when backpressure keeps the interval open (the final one is always
        closed, and every held one shipped)."""
        if not final and self.blocked():
            self._unshipped["deferred"] += 1
            self._health()
            return None
        self.collector.close_interval()
        return self.ship_ready(final)

    def ship_ready(self, final: bool = False) -> list:
        """Ship the closed intervals that are ready: [(stats, local path or None)]."""
        out = []
        if not final and self.blocked():
            return out
        for w in self.collector.ready_profiles(per_pid=any(b.per_process for b in self.backends), final=final):
            path = None
            if w.stats.kernels or w.stats.lost_said or w.stats.pc_samples:
                for b in self.backends:
                    path = b.submit(w) or path  # the local file, for the status line
            else:
                self._unshipped["empty"] += 1
            out.append((w.stats, path))
        self._health()
        return out

    def dropped_profiles(self) -> int:
        """Profiles refused so far: the local store's failed writes, and the requests
        every backend's queue dropped (`health` says so)."""
        n = sum(b.profile_counts().get("write_failed", 0) for b in self.backends)
        for b in self.backends:
            q = b.queue_stats()
            n += sum(q.dropped.values()) if q is not None else 0
        return n

    def profile_counts(self) -> dict:
        out = {"written": 0, "sent": 0, **self._unshipped}
        for b in self.backends:
            for outcome, n in b.profile_counts().items():
                # Every backend is handed every window: two that count the same
                # outcome (parca and otlp both count "sent") count the same windows.
                out[outcome] = max(out.get(outcome, 0), n)
        return out

    def status(self) -> str:
        """' local=dropped:N,rotated:N parca=sent:N,queued:N,dropped:N', for the status line."""
        return "".join(b.status() for b in self.backends)

    def close(self, flush_timeout: float = 5.0) -> None:
        for b in self.backends:
            b.close(flush_timeout)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
