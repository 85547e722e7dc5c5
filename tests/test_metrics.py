"""/metrics state without BPF: exact counters from drains, top-N + "other", aging, exposition."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_agent.probes.drain import AggKey, AggVal
from gpu_agent.outputs.metrics import Metrics, parse_addr, serve


@dataclass
class FakeDrain:
    totals: dict
    sampled: dict = field(default_factory=dict)


@dataclass
class FakeProc:
    comm: str
    pod: dict = field(default_factory=dict)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def drain(*rows):
    """rows: (pid, device, kernel_id, gpu_ns, launches); two streams each, to check summing."""
    out = {}
    for pid, dev, kid, ns, n in rows:
        for stream in (1, 2):
            out[AggKey(pid, dev, stream, 0, kid, 0)] = AggVal(ns // 2, n // 2 if stream == 1 else n - n // 2, 0, 0)
    return FakeDrain(out)


def scrape(m: Metrics) -> dict:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            # Prometheus treats an empty label as absent: so do we
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v)))] = s.value
    return out


def kernel_values(m, name="gpu_agent_kernel_gpu_seconds_total"):
    return {dict(k)["kernel"] + "@" + dict(k)["pid"]: v for (n, k), v in scrape(m).items() if n == name}


def new_metrics(clock, **kw):
    pods = {2: {"pod": "web-0", "namespace": "prod", "container": "app"}}
    return Metrics(
        proc_info=lambda pid: FakeProc(f"p{pid}", pods.get(pid, {})),
        kernel_name=lambda kid: f"kernel_{kid}",
        clock=clock,
        **kw,
    )


def test_counters_are_exact_sums_of_drains_with_labels():
    c = Clock()
    m = new_metrics(c)
    m.on_drain(drain((1, 0, 10, 4000, 4), (2, 1, 10, 1000, 2)))
    c.t += 1
    m.on_drain(drain((1, 0, 10, 2000, 2)))
    vals = scrape(m)
    key = (
        "gpu_agent_kernel_gpu_seconds_total",
        tuple(
            sorted(
                {
                    "pid": "1",
                    "comm": "p1",
                    "cuda_device": "0",
                    "kernel": "kernel_10",
                    "pod": "",
                    "namespace": "",
                    "container": "",
                }.items()
            )
        ),
    )
    key = (key[0], tuple((k, v) for k, v in key[1] if v))
    assert vals[key] == 6000 / 1e9
    pod_key = [k for k in vals if k[0] == "gpu_agent_kernel_launches_total" and ("pod", "web-0") in k[1]]
    assert len(pod_key) == 1 and vals[pod_key[0]] == 2
    assert ("namespace", "prod") in pod_key[0][1] and ("container", "app") in pod_key[0][1]
    busy = {dict(k)["pid"]: v for (n, k), v in vals.items() if n == "gpu_agent_gpu_busy_seconds_total"}
    assert busy == {"1": 6000 / 1e9, "2": 1000 / 1e9}


def test_top_n_keeps_the_heaviest_kernels_and_other_only_grows():
    c = Clock()
    m = new_metrics(c, top_n=2)
    m.on_drain(drain((1, 0, 1, 9000, 1), (1, 0, 2, 8000, 1), (1, 0, 3, 100, 1), (1, 0, 4, 50, 1)))
    v = kernel_values(m)
    assert v == {"kernel_1@1": 9e-6, "kernel_2@1": 8e-6, "other@1": 150e-9}
    total = sum(v.values())
    history = [v]
    # kernel 3 becomes the heaviest: it gets its own series from now on; kernel 2 is demoted
    for _ in range(5):
        c.t += 1
        m.on_drain(drain((1, 0, 3, 50000, 1), (1, 0, 2, 10, 1)))
        history.append(kernel_values(m))
    v = history[-1]
    assert "kernel_3@1" in v and "other@1" in v
    assert abs(sum(v.values()) - (total + 5 * 50010e-9)) < 1e-12  # nothing lost, nothing doubled
    for a, b in zip(history, history[1:]):  # every series is monotonic
        for k in a:
            if k in b:
                assert b[k] >= a[k] - 1e-15, k
    # a demoted kernel's frozen series ages out after the ttl; the series count stays bounded
    c.t += 301
    m.on_drain(drain((1, 0, 3, 1, 1)))
    v = kernel_values(m)
    assert "kernel_2@1" not in v and set(v) <= {"kernel_1@1", "kernel_3@1", "other@1"}


def test_exited_processes_age_out():
    c = Clock()
    m = new_metrics(c, ttl_s=60)
    m.on_drain(drain((1, 0, 1, 1000, 1), (2, 0, 1, 1000, 1)))
    m.on_exit(2)
    c.t += 30
    m.expire()
    assert {"kernel_1@1", "kernel_1@2"} == set(kernel_values(m))  # still scrapeable for a while
    c.t += 31
    m.expire()
    assert {"kernel_1@1"} == set(kernel_values(m))
    assert not any(dict(k).get("pid") == "2" for (n, k) in scrape(m))


def test_latency_histogram_buckets():
    c = Clock()
    m = new_metrics(c)
    b = [0] * 64
    b[12] = 3  # [4096, 8192) ns
    b[20] = 1  # [~1.05 ms, ~2.1 ms)
    m.on_latency({(1, 0): (b, 3 * 5000 + 1_500_000)})
    vals = scrape(m)
    h = {dict(k).get("le"): v for (n, k), v in vals.items() if n == "gpu_agent_launch_queue_latency_seconds_bucket"}
    assert h[repr(4096 / 1e9)] == 0 and h[repr(8192 / 1e9)] == 3 and h["+Inf"] == 4
    assert h[repr(2**21 / 1e9)] == 4
    s = {n: v for (n, k), v in vals.items() if n.startswith("gpu_agent_launch_queue_latency_seconds_")}
    assert s["gpu_agent_launch_queue_latency_seconds_count"] == 4
    assert abs(s["gpu_agent_launch_queue_latency_seconds_sum"] - 1.515e-3) < 1e-12


def test_served_over_http_with_health_metrics():
    c = Clock()
    m = new_metrics(c)
    m.on_drain(drain((1, 0, 1, 1000, 1)))
    m.set_health(attached_processes=1, bpf_events=7, drops={"agg_full": 2}, kernel_records=5)
    server, _t, (host, port) = serve(m, "127.0.0.1:0")
    try:
        assert host == "127.0.0.1"
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'gpu_agent_drops_total{reason="agg_full"} 2.0' in text
    assert "gpu_agent_attached_processes 1.0" in text
    assert "gpu_agent_bpf_events_total 7.0" in text
    assert "gpu_agent_process_resident_memory_bytes" in text
    assert "gpu_agent_process_cpu_seconds_total" in text


def test_metrics_addr_defaults_to_localhost():
    assert parse_addr(":9464") == ("127.0.0.1", 9464)
    assert parse_addr("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_addr("[::1]:9") == ("::1", 9)


def test_pod_labels_are_absent_outside_kubernetes_and_long_kernel_names_fit_a_label():
    """The exposition itself (not Prometheus's reading of it): no pod="" outside
    Kubernetes; a 4 919-character demangled name becomes a label value Mimir and
    Cortex accept (at most 1 024 bytes, its head and a hash of the whole)."""
    long_name = "void cutlass::Kernel<" + "cutlass::gemm::GemmShape<128, 128, 32>, " * 120 + ">(Params)"
    assert len(long_name) > 4000
    names = {10: "short_kernel", 11: long_name, 12: long_name + "x"}
    m = Metrics(proc_info=lambda pid: FakeProc(f"p{pid}", {}), kernel_name=names.get, clock=Clock())
    m.on_drain(drain((1, 0, 10, 4000, 4), (1, 0, 11, 2000, 2), (1, 0, 12, 1000, 2)))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)
    text = generate_latest(reg).decode()
    assert "pod=" not in text and "namespace=" not in text and "container=" not in text
    kernels = {
        s.labels["kernel"] for fam in text_string_to_metric_families(text) for s in fam.samples if "kernel" in s.labels
    }
    assert "short_kernel" in kernels and len(kernels) == 3  # the two long names stay apart
    assert all(len(k.encode()) <= 1024 for k in kernels)
    assert any(k.startswith("void cutlass::Kernel<cutlass::gemm::GemmShape<128, 128, 32>") for k in kernels)
