"""Prometheus /metrics for `gpu-agent run --metrics-addr HOST:PORT`.

Fed from the very drains the profiles are built from (Collector.drain_listeners),
so a kernel's counter and the profiles agree exactly and nothing is counted
twice. The agent drains every second while metrics are on. A process's lost
records (`[dropped: cupti]`) come once their interval has bounded them, as its
profile is built (join/invariants.py's bound_drops).

Kernel series: gpu_agent_kernel_gpu_seconds_total and
gpu_agent_kernel_launches_total{pid, comm, cuda_device, gpu_uuid, gpu_model, kernel, pod,
namespace, container} (pod labels absent outside Kubernetes). gpu_uuid and gpu_model
are the device's identity (DCGM's exporter calls them UUID and modelName: README,
"Scraping with Prometheus", shows the join); they are absent until the shim has
announced the device (its gpu_device probe, within a poll of the attach).

Bounded cardinality:
  - the kernel label keeps the top-N kernels by GPU time (node-wide, scored with
    an exponential decay, half-life 10 min); increments of every other kernel go to
    kernel="other". Each increment goes to the series its kernel belongs to at that
    moment, so every series, "other" included, only grows: rate() never sees a
    false reset, and the sum over kernels is the exact total.
  - a kernel's own series that stops growing (it left the top-N) is removed after
    --metrics-ttl; so are all series of a process that exited (after its last
    values have had time to be scraped).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

OTHER = "other"
POD_LABELS = ("pod", "namespace", "container")
# Mimir and Cortex refuse label values over 2 048 bytes by default; demangled C++
# template kernels run to thousands. Longer names keep their head and a hash of the
# whole (the profiles keep the whole name).
KERNEL_LABEL_MAX = 1024


def kernel_label(name: str) -> str:
    if len(name.encode()) <= KERNEL_LABEL_MAX:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return name.encode()[: KERNEL_LABEL_MAX - 16].decode(errors="ignore") + f"…#{digest}"


def _without_empty_pod_labels(family):
    """Outside Kubernetes the pod labels are absent, not empty."""
    family.samples = [
        s._replace(labels={k: v for k, v in s.labels.items() if v or k not in POD_LABELS}) for s in family.samples
    ]
    return family


GPU_LABELS = ("gpu_uuid", "gpu_model")  # DCGM's UUID and modelName, in this exporter's style
KERNEL_LABELS = ("pid", "comm", "cuda_device") + GPU_LABELS + ("kernel",) + POD_LABELS
PROC_LABELS = ("pid", "comm", "cuda_device") + GPU_LABELS + POD_LABELS
# Launch-to-start latency buckets: powers of two, 1.024 us .. ~17 s (log2 histogram in BPF).
LAT_MIN_LOG2, LAT_MAX_LOG2 = 10, 34


@dataclass
class _Series:
    gpu_ns: int = 0
    launches: int = 0
    updated: float = 0.0


@dataclass
class _Proc:
    comm: str
    pod: dict
    exited_at: Optional[float] = None
    pod_checked: float = 0.0
    busy_ns: dict = field(default_factory=dict)  # device -> ns
    latency: dict = field(default_factory=dict)  # device -> [buckets(64), sum_ns]


class Metrics:
    """State behind /metrics. on_drain/on_exit/on_latency/set_health run in the agent's
    loop; collect() runs in the HTTP server's thread; one lock guards both."""

    def __init__(
        self,
        *,
        top_n: int = 50,
        ttl_s: float = 300.0,
        half_life_s: float = 600.0,
        proc_info: Callable[[int], object],
        kernel_name: Callable[[int], str],
        device_info: Callable[[int, int], object] = lambda pid, dev: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if top_n < 1:
            raise ValueError("top-N must be at least 1")
        self.top_n = top_n
        self.ttl_s = ttl_s
        self.half_life_s = half_life_s
        self._proc_info = proc_info
        self._kernel_name = kernel_name
        self._device_info = device_info  # (pid, ordinal) -> .uuid, .model, or None
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[tuple[int, int, object], _Series] = {}  # (pid, dev, kernel_id|OTHER)
        self._procs: dict[int, _Proc] = {}
        self._scores: dict[int, float] = {}
        self._top: set[int] = set()
        self._last_decay: Optional[float] = None
        self._names: dict[int, str] = {}
        self._health: dict = {}
        self._exporters: list = []

    # -- feeding ------------------------------------------------------------
    def _proc(self, pid: int) -> _Proc:
        p = self._procs.get(pid)
        now = self._clock()
        if p is None:
            info = self._proc_info(pid)
            p = self._procs[pid] = _Proc(getattr(info, "comm", "?"), dict(getattr(info, "pod", {}) or {}))
            p.pod_checked = now
        elif p.exited_at is None and len(p.pod) < len(POD_LABELS) and now - p.pod_checked >= 5.0:
            # Pod metadata can arrive after the first kernels: take it once it is more complete.
            p.pod_checked = now
            pod = dict(getattr(self._proc_info(pid), "pod", {}) or {})
            if len(pod) > len(p.pod):
                p.pod = pod
        return p

    def on_drain(self, drain) -> None:
        """drain.totals: {(tgid, device, stream, graph, kernel_id, 0): (gpu_ns, launches, ...)}."""
        now = self._clock()
        per: dict[tuple[int, int, int], list[int]] = {}
        for k, v in drain.totals.items():
            key = (k[0], k[1], k[4])
            acc = per.setdefault(key, [0, 0])
            ns, n = v.estimated()
            acc[0] += ns
            acc[1] += n
        with self._lock:
            self._decay(now)
            for (pid, dev, kid), (ns, n) in per.items():
                self._scores[kid] = self._scores.get(kid, 0.0) + ns
            self._rank()
            for (pid, dev, kid), (ns, n) in per.items():
                if kid not in self._names:
                    name = self._kernel_name(kid)
                    if name is not None:
                        self._names[kid] = name
                p = self._proc(pid)
                p.busy_ns[dev] = p.busy_ns.get(dev, 0) + ns
                s = self._series.setdefault((pid, dev, kid if kid in self._top else OTHER), _Series())
                s.gpu_ns += ns
                s.launches += n
                s.updated = now
            self._expire(now)
        latency = getattr(drain, "latency", None)
        if latency:
            self.on_latency(latency)

    def on_latency(self, hist: dict) -> None:
        """hist: {(tgid, device): (buckets list[64] of counts by log2(ns), sum_ns)}."""
        with self._lock:
            for (pid, dev), (buckets, sum_ns) in hist.items():
                p = self._proc(pid)
                acc = p.latency.get(dev)
                if acc is None:
                    acc = p.latency[dev] = [[0] * 64, 0]
                for i, c in enumerate(buckets[:64]):
                    acc[0][i] += c
                acc[1] += sum_ns

    def on_exit(self, pid: int) -> None:
        with self._lock:
            p = self._procs.get(pid)
            if p is not None and p.exited_at is None:
                p.exited_at = self._clock()

    def set_health(self, **values) -> None:
        with self._lock:
            self._health.update(values)

    def add_exporter(self, backend) -> None:
        """A backend (export/backends.ProfileBackend): its queue_stats() feed
        gpu_agent_export_*; one without a send queue (the local store) adds none."""
        self._exporters.append(backend)

    # -- bounds -------------------------------------------------------------
    def _decay(self, now: float) -> None:
        if self._last_decay is not None and self.half_life_s > 0:
            f = 0.5 ** ((now - self._last_decay) / self.half_life_s)
            if f < 1.0:
                for k in self._scores:
                    self._scores[k] *= f
        self._last_decay = now

    def _rank(self) -> None:
        if len(self._scores) <= self.top_n:
            self._top = set(self._scores)
            return
        ranked = sorted(self._scores.items(), key=lambda kv: (-kv[1], kv[0]))
        self._top = {k for k, _ in ranked[: self.top_n]}
        # Forget the scores of the long tail (bounded memory); they restart from 0.
        for k, _ in ranked[max(4 * self.top_n, 1000) :]:
            del self._scores[k]

    def _expire(self, now: float) -> None:
        dead = {pid for pid, p in self._procs.items() if p.exited_at is not None and now - p.exited_at >= self.ttl_s}
        for key in list(self._series):
            pid, _dev, kid = key
            if pid in dead:
                del self._series[key]
            elif kid != OTHER and kid not in self._top and now - self._series[key].updated >= self.ttl_s:
                del self._series[key]
        for pid in dead:
            del self._procs[pid]
        live_kernels = {k[2] for k in self._series}
        for kid in [k for k in self._names if k not in live_kernels and k not in self._top]:
            del self._names[kid]

    def expire(self) -> None:
        with self._lock:
            self._expire(self._clock())

    # -- scrape -------------------------------------------------------------
    def series_count(self) -> int:
        with self._lock:
            return len(self._series)

    def _gpu(self, pid: int, dev: int) -> tuple[str, str]:
        d = self._device_info(pid, dev)
        return (getattr(d, "uuid", "") or "", getattr(d, "model", "") or "") if d else ("", "")

    def describe(self):
        return []  # collected lazily: no duplicate-name checks against a static description

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            gpu = CounterMetricFamily(
                "gpu_agent_kernel_gpu_seconds",
                "GPU time of CUDA kernels (exact, from every kernel record); "
                'kernels outside the top-N are summed under kernel="other"',
                labels=KERNEL_LABELS,
            )
            launches = CounterMetricFamily("gpu_agent_kernel_launches", "CUDA kernel executions", labels=KERNEL_LABELS)
            for (pid, dev, kid), s in sorted(self._series.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
                p = self._procs.get(pid)
                if p is None:
                    continue
                kname = (
                    OTHER
                    if kid == OTHER
                    else self._names.get(kid) or self._kernel_name(kid) or f"[unknown kernel {kid:#x}]"
                )
                kname = kernel_label(kname)
                labels = [str(pid), p.comm, str(dev), *self._gpu(pid, dev), kname] + [
                    p.pod.get(k, "") for k in POD_LABELS
                ]
                gpu.add_metric(labels, s.gpu_ns / 1e9)
                launches.add_metric(labels, s.launches)
            yield _without_empty_pod_labels(gpu)
            yield _without_empty_pod_labels(launches)

            busy = CounterMetricFamily(
                "gpu_agent_gpu_busy_seconds",
                "GPU time of a process's kernels on a device (sum of kernel durations: concurrent kernels each count)",
                labels=PROC_LABELS,
            )
            lat = HistogramMetricFamily(
                "gpu_agent_launch_queue_latency_seconds",
                "Kernel start minus launch time (CUPTI clock), for sampled launches",
                labels=PROC_LABELS,
            )
            for pid, p in sorted(self._procs.items()):
                for dev, ns in sorted(p.busy_ns.items()):
                    busy.add_metric(
                        [str(pid), p.comm, str(dev), *self._gpu(pid, dev)] + [p.pod.get(k, "") for k in POD_LABELS],
                        ns / 1e9,
                    )
                for dev, (buckets, sum_ns) in sorted(p.latency.items()):
                    cum, out = 0, []
                    # bucket i holds latencies in [2^i, 2^(i+1)) ns: cumulative up to le=2^(i+1)
                    for i in range(64):
                        cum += buckets[i]
                        if LAT_MIN_LOG2 <= i + 1 <= LAT_MAX_LOG2:
                            out.append((repr(2 ** (i + 1) / 1e9), cum))
                    out.append(("+Inf", cum))
                    lat.add_metric(
                        [str(pid), p.comm, str(dev), *self._gpu(pid, dev)] + [p.pod.get(k, "") for k in POD_LABELS],
                        out,
                        sum_ns / 1e9,
                    )
            yield _without_empty_pod_labels(busy)
            yield _without_empty_pod_labels(lat)

            h = dict(self._health)
            g = GaugeMetricFamily(
                "gpu_agent_attached_processes", "Processes with the shim attached that reported GPU work"
            )
            g.add_metric([], h.get("attached_processes", 0))
            yield g
            c = CounterMetricFamily("gpu_agent_bpf_events", "BPF ring-buffer events handled")
            c.add_metric([], h.get("bpf_events", 0))
            yield c
            c = CounterMetricFamily("gpu_agent_kernel_records", "Kernel records aggregated by BPF")
            c.add_metric([], h.get("kernel_records", 0))
            yield c
            c = CounterMetricFamily("gpu_agent_sampled_launches", "Launches with a sampled stack")
            c.add_metric([], h.get("sampled_launches", 0))
            yield c
            c = CounterMetricFamily("gpu_agent_drops", "Data lost, by reason (BPF and agent side)", labels=["reason"])
            for reason, v in sorted((h.get("drops") or {}).items()):
                c.add_metric([reason], v)
            yield c
            c = CounterMetricFamily("gpu_agent_profiles", "Profile windows closed, by outcome", labels=["outcome"])
            for outcome, v in sorted((h.get("profiles") or {}).items()):
                c.add_metric([outcome], v)
            yield c
            c = GaugeMetricFamily("gpu_agent_metric_series", "Kernel series kept for /metrics")
            c.add_metric([], len(self._series))
            yield c

        sent = CounterMetricFamily("gpu_agent_export_sent_profiles", "Requests a backend accepted", labels=["backend"])
        fails = CounterMetricFamily(
            "gpu_agent_export_failures", "Failed send attempts, by gRPC status", labels=["backend", "code"]
        )
        dropped = CounterMetricFamily(
            "gpu_agent_export_dropped_profiles",
            "Requests dropped without reaching the backend, by reason",
            labels=["backend", "reason"],
        )
        depth = GaugeMetricFamily("gpu_agent_export_queue_depth", "Requests waiting or in flight", labels=["backend"])
        qbytes = GaugeMetricFamily("gpu_agent_export_queue_bytes", "Bytes waiting or in flight", labels=["backend"])
        for b in self._exporters:
            s = b.queue_stats()
            if s is None:
                continue
            sent.add_metric([b.name], s.sent)
            for code, v in sorted(s.failures.items()):
                fails.add_metric([b.name, code], v)
            if b.encode_failures:
                fails.add_metric([b.name, "ENCODE"], b.encode_failures)
            for reason, v in sorted(s.dropped.items()):
                dropped.add_metric([b.name, reason], v)
            depth.add_metric([b.name], s.depth)
            qbytes.add_metric([b.name], s.queued_bytes)
        yield from (sent, fails, dropped, depth, qbytes)


def parse_addr(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464', ':9464' (localhost), '0.0.0.0:9464', '[::1]:9464' -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:  # 0: any free port
        raise ValueError(f"invalid --metrics-addr {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def serve(metrics: Metrics, addr: str, token_file: Optional[str] = None):
    """Start the /metrics HTTP server in a thread; returns (server, thread, (host, port)).
    prometheus_client's WSGI app, in a server with bounded threads and idle timeouts
    (httpbounds.py): slow local clients cannot take the agent's threads and fds.
    token_file: every request must carry its token (Authorization: Bearer, as
    Prometheus's `authorization: {credentials_file: ...}` sends it), else 401; open
    otherwise, as Prometheus's exporters are (docs/security.md says when to give one).
    ValueError: a token file that is unreadable, empty, or readable by others."""
    import socket
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

    from .httpbounds import BoundedThreads, TokenFile

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    class Server(BoundedThreads, ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in addr.rsplit(":", 1)[0] else socket.AF_INET

    host, port = parse_addr(addr)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(namespace="gpu_agent", registry=registry)  # its own CPU seconds and RSS
    app = make_wsgi_app(registry)
    if token_file:
        app = _bearer(app, TokenFile.for_option("--metrics-token-file", token_file))
    server = make_server(host, port, app, server_class=Server, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, name="gpu-agent-metrics", daemon=True)
    thread.start()
    return server, thread, (host, server.server_address[1])


def _bearer(app, token):
    """The WSGI app behind a bearer token: a request without it gets 401."""

    def guarded(environ, start_response):
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth[:7].lower() == "bearer " and token.matches(auth[7:].strip()):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="gpu-agent metrics"')],
        )
        return [b"a bearer token is required (--metrics-token-file)\n"]

    return guarded
