"""`gpu-agent run` streaming to backends, end to end with real eBPF and the mock CUDA stack:
Parca WriteRaw and OTLP Export into in-process gRPC servers (decoded with the same .proto
modules; pprof payloads read by Go's pprof), a backend that goes down and comes back, and
/metrics scraped by a real Prometheus server."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, agent_cmd, ground_truth, mock_env, need_ebpf
from support.grpc_backends import Backend, free_port
from support.pprof_tool import raw

from gpu_agent.symbols.demangle import demangle_kernel


class Agent:
    """`gpu-agent run` in the background; stderr is read continuously (never blocks)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(agent_cmd("run", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        ready = threading.Event()

        def read_err():
            for line in self.proc.stderr:
                self.err.append(line)
                if "watching every process" in line:  # not "also watching" a copy
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read_err, daemon=True)
        self._reader.start()
        if not ready.wait(120) or self.proc.poll() is not None:
            pytest.fail("agent did not start: " + "".join(self.err))
        m = re.search(r"metrics on (http://\S+/metrics)", "".join(self.err))
        self.metrics_url = m.group(1) if m else None

    def metrics(self) -> dict:
        text = urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name_labels, _, value = line.rpartition(" ")
            out[name_labels] = float(value)
        return out

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        # stdout here; stderr stays the reader thread's (communicate() would close it
        # under the thread, which then failed on the closed pipe)
        self.proc.wait(timeout=60)  # `run` writes little to stdout: no pipe fills
        out = self.proc.stdout.read()
        self._reader.join(timeout=10)
        assert self.proc.returncode == 0, "".join(self.err)
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def workload(*args: str, truth: Path | None = None, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(MOCK_APP), *args],
        env=mock_env(truth, CUDA_INJECTION64_PATH=str(SHIM), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


@pytest.fixture
def ebpf(built):
    need_ebpf()


def test_parca_write_raw_end_to_end(tmp_path, ebpf):
    srv = Backend().start()
    agent = Agent(
        "--interval",
        "1s",
        "--remote-store",
        f"grpc://127.0.0.1:{srv.port}",
        "--label",
        "team=ml",
        "--label",
        "cluster=ci",
    )
    try:
        truth_file = tmp_path / "truth.tsv"
        app = workload(
            "--paths",
            "cuLaunchKernel,cudaLaunchKernel,cuGraphLaunch",
            # 3.5 s: the shim flushes every 1 s from its attach, the agent drains every 1 s
            # from its "watching" line, just before the app starts: with 2 s, the first
            # flush came just after a drain and the exit flush just before the next, so
            # both landed in one interval (one series) whenever the two clocks' phases
            # met so (every run, once the agent's start got 1.3 s faster)
            "--duration",
            "3.5",
            "--sleep-ms",
            "2",
            truth=truth_file,
        )
        assert app.wait(timeout=60) == 0
        time.sleep(1.5)
    finally:
        out = agent.stop()
        srv.stop()
    assert "parca=sent:" in out
    truth = ground_truth(truth_file)
    got = defaultdict(lambda: [0, 0])
    series = 0
    for req in srv.rec.parca:
        for s in req.series:
            labels = {l.name: l.value for l in s.labels.labels}
            if labels.get("pid") != str(app.pid):
                continue
            series += 1
            assert labels == {
                "__name__": "gpu_time",
                "node": node(),
                "pid": str(app.pid),
                "comm": "mock_workload",
                "team": "ml",
                "cluster": "ci",
            }
            assert len(s.samples) == 1
            path = tmp_path / f"p{series}.pb.gz"
            path.write_bytes(s.samples[0].raw_profile)
            for smp in raw(path):  # Go's pprof parses every payload
                assert smp.labels["pid"] == str(app.pid)
                got[smp.system_names[0]][0] += smp.values[1]
                got[smp.system_names[0]][1] += smp.values[0]
    assert series >= 2, "expected one series per window for the process"
    assert {k: tuple(v) for k, v in got.items()} == truth


def test_otlp_export_end_to_end(tmp_path, ebpf):
    srv = Backend().start()
    agent = Agent(
        "--interval",
        "1s",
        "--otlp-endpoint",
        f"grpc://127.0.0.1:{srv.port}",
        "--otlp-include-pprof",
        "--label",
        "team=ml",
    )
    try:
        truth_file = tmp_path / "truth.tsv"
        app = workload(
            "--paths", "cuLaunchKernel,cudaGraphLaunch", "--duration", "2", "--sleep-ms", "2", truth=truth_file
        )
        assert app.wait(timeout=60) == 0
        time.sleep(1.5)
    finally:
        agent.stop()
        srv.stop()
    truth = ground_truth(truth_file)
    got = defaultdict(lambda: [0, 0])
    pprof_got = defaultdict(int)
    for i, req in enumerate(srv.rec.otlp):
        d = req.dictionary
        st = list(d.string_table)
        for rp in req.resource_profiles:
            attrs = {kv.key: (kv.value.string_value or kv.value.int_value) for kv in rp.resource.attributes}
            if attrs.get("process.pid") != app.pid:
                continue
            assert attrs["host.name"] == node() and attrs["process.executable.name"] == "mock_workload"
            assert attrs["team"] == "ml"
            for p in rp.scope_profiles[0].profiles:
                vt = st[p.sample_type.type_strindex]
                for smp in p.samples:
                    stack = d.stack_table[smp.stack_index]
                    leaf = d.location_table[stack.location_indices[0]]
                    fn = d.function_table[leaf.lines[0].function_index]
                    got[st[fn.system_name_strindex]][0 if vt == "kernel_launches" else 1] += sum(smp.values)
                    names = [
                        st[d.function_table[d.location_table[j].lines[0].function_index].name_strindex]
                        for j in stack.location_indices
                    ]
                    assert names[0].startswith("k_")
                if p.original_payload:
                    path = tmp_path / f"o{i}.pb.gz"
                    path.write_bytes(p.original_payload)
                    for s in raw(path):
                        pprof_got[s.system_names[0]] += s.values[0]
    assert {k: tuple(v) for k, v in got.items()} == truth
    assert dict(pprof_got) == {k: v[1] for k, v in truth.items()}


def _value(metrics: dict, name: str, **labels) -> float:
    total = 0.0
    for key, v in metrics.items():
        if key.split("{")[0] != name:
            continue
        if all(f'{k}="{val}"' in key for k, val in labels.items()):
            total += v
    return total


def test_backend_down_then_back_queue_bounded_drops_counted(tmp_path, ebpf):
    port = free_port()
    srv = Backend(port).start()
    agent = Agent(
        "--interval",
        "300ms",
        "--remote-store",
        f"grpc://127.0.0.1:{port}",
        "--queue-size",
        "2",
        "--retry-initial-backoff",
        "100ms",
        "--retry-max-backoff",
        "400ms",
        "--export-timeout",
        "1s",
        "--metrics-addr",
        "127.0.0.1:0",
    )
    try:
        # CUPTI buffers flushed every 100 ms: every 300 ms window has kernels
        app = workload("--paths", "cuLaunchKernel", "--duration", "10", "--sleep-ms", "2", GPU_AGENT_FLUSH_MS="100")
        assert srv.rec.wait(lambda r: len(r.parca) >= 2, 30), "nothing reached the backend"
        srv.stop()
        down_at = time.monotonic()
        max_depth = 0
        rss = []
        while time.monotonic() - down_at < 4.0:
            m = agent.metrics()
            max_depth = max(max_depth, _value(m, "gpu_agent_export_queue_depth", backend="parca"))
            rss.append(_value(m, "gpu_agent_process_resident_memory_bytes"))
            assert agent.proc.poll() is None, "the agent died while the backend was down"
            time.sleep(0.2)
        m = agent.metrics()
        dropped_while_down = _value(m, "gpu_agent_export_dropped_profiles_total", backend="parca")
        failures = _value(m, "gpu_agent_export_failures_total", backend="parca")
        srv2 = Backend(port).start()  # the same address comes back
        try:
            assert srv2.rec.wait(lambda r: len(r.parca) >= 3, 20), "profiles did not resume"
            assert app.wait(timeout=60) == 0
            time.sleep(1.0)
            end = time.monotonic() + 10
            while time.monotonic() < end:
                m = agent.metrics()
                if _value(m, "gpu_agent_export_queue_depth", backend="parca") == 0:
                    break
                time.sleep(0.2)
            sent = _value(m, "gpu_agent_export_sent_profiles_total", backend="parca")
            dropped = _value(m, "gpu_agent_export_dropped_profiles_total", backend="parca")
            windows = _value(m, "gpu_agent_profiles_total", outcome="sent")
        finally:
            out = agent.stop()
            srv2.stop()
    finally:
        agent.kill()
        srv.stop()
    assert 1 <= max_depth <= 3, max_depth  # 2 waiting + 1 in flight, never more
    assert dropped_while_down >= 3, dropped_while_down  # ~13 windows into a queue of 2
    assert failures >= 2
    assert dropped == _value(m, "gpu_agent_export_dropped_profiles_total", backend="parca", reason="queue_full")
    assert sent + dropped == windows, (sent, dropped, windows)  # every profile sent or counted
    assert sent >= len(srv.rec.parca) + 3 - 1
    assert max(rss) < min(rss) + 64 * 2**20, (min(rss), max(rss))
    assert re.search(r"parca=sent:\d+,queued:\d+,dropped:[1-9]", out), out
    assert any("sending again" in line for line in agent.err), "".join(agent.err)


# -- Prometheus ----------------------------------------------------------------------


def _prometheus(tmp_path: Path, target: str, token_file: Path | None = None):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not installed (Debian package prometheus; .ci/run installs it)")
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpu-agent\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n"
        + (f"    authorization:\n      credentials_file: {token_file}\n" if token_file else "")
        + f"    static_configs:\n      - targets: ['{target}']\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"),
    )
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            if urllib.request.urlopen(base + "/-/ready", timeout=2).status == 200:
                return proc, base
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    pytest.fail("prometheus did not start: " + (tmp_path / "prometheus.log").read_text())


def _query(base: str, q: str) -> list:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    data = json.load(urllib.request.urlopen(url, timeout=10))
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_prometheus_scrapes_exact_kernel_totals(tmp_path, ebpf):
    """As the README's block: /metrics behind a token file, Prometheus's
    authorization.credentials_file the same file."""
    mport = free_port()
    token = tmp_path / "metrics.token"
    token.write_text(secrets.token_urlsafe(24) + "\n")
    token.chmod(0o600)
    agent = Agent(
        "--interval", "30s", "--metrics-addr", f"127.0.0.1:{mport}", "--metrics-token-file", str(token),
        "--output-dir", str(tmp_path / "profiles"),
    )  # fmt: skip
    prom, base = _prometheus(tmp_path, f"127.0.0.1:{mport}", token)
    try:
        with pytest.raises(urllib.error.HTTPError) as no_token:
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10)
        assert no_token.value.code == 401
        truth_file = tmp_path / "truth.tsv"
        app = workload(
            "--paths", "cuLaunchKernel,cudaLaunchKernel", "--duration", "3", "--sleep-ms", "2", truth=truth_file
        )
        assert app.wait(timeout=60) == 0
        truth = {demangle_kernel(k): v for k, v in ground_truth(truth_file).items()}
        assert truth
        # The agent drains every 1 s and Prometheus scrapes every 1 s: the exact totals must
        # be in Prometheus within a few scrapes of the workload's exit (the profile interval
        # is 30 s, so this is the metrics path alone).
        end = time.monotonic() + 20
        got = {}
        while time.monotonic() < end:
            res = _query(base, f'gpu_agent_kernel_gpu_seconds_total{{pid="{app.pid}"}}')
            got = {r["metric"]["kernel"]: float(r["value"][1]) for r in res}
            if set(got) == set(truth) and all(abs(got[k] - truth[k][1] / 1e9) < 1e-12 for k in truth):
                break
            time.sleep(0.5)
        assert set(got) == set(truth), (got, truth)
        for k, (launches, ns) in truth.items():
            assert abs(got[k] - ns / 1e9) < 1e-12, (k, got[k], ns)
        res = _query(base, f'gpu_agent_kernel_launches_total{{pid="{app.pid}"}}')
        assert {r["metric"]["kernel"]: int(float(r["value"][1])) for r in res} == {k: v[0] for k, v in truth.items()}
        for r in _query(base, f'gpu_agent_kernel_gpu_seconds_total{{pid="{app.pid}"}}'):
            assert r["metric"]["comm"] == "mock_workload" and r["metric"]["cuda_device"] == "0"
            # DCGM's names for the device's identity (shim/mock/mock_cuda.c's UUID and model)
            assert r["metric"]["gpu_uuid"] == "GPU-6d6f636b-0001-0203-0405-060708090a00"
            assert r["metric"]["gpu_model"] == "NVIDIA H100 80GB HBM3 (mock)"
            assert all(k == k.lower() for k in r["metric"]), r["metric"]  # one style: snake_case
        busy = _query(base, f'gpu_agent_gpu_busy_seconds_total{{pid="{app.pid}"}}')
        assert abs(sum(float(r["value"][1]) for r in busy) - sum(v[1] for v in truth.values()) / 1e9) < 1e-9
        # launch-to-start latency (sampled, non-graph launches): shim timestamp -> BPF histogram
        lat_n = _query(base, f'gpu_agent_launch_queue_latency_seconds_count{{pid="{app.pid}"}}')
        lat_s = _query(base, f'gpu_agent_launch_queue_latency_seconds_sum{{pid="{app.pid}"}}')
        n = sum(float(r["value"][1]) for r in lat_n)
        assert 0 < n <= sum(v[0] for v in truth.values())
        assert 0 < sum(float(r["value"][1]) for r in lat_s) / n < 1.0  # mean under a second
        q = _query(
            base,
            f'histogram_quantile(0.5, sum by (le) (gpu_agent_launch_queue_latency_seconds_bucket{{pid="{app.pid}"}}))',
        )
        assert q and 0 < float(q[0]["value"][1]) < 1.0, q
        # the agent's own health is scraped too
        for name in (
            "gpu_agent_bpf_events_total",
            "gpu_agent_process_cpu_seconds_total",
            "gpu_agent_process_resident_memory_bytes",
            "gpu_agent_attached_processes",
            "gpu_agent_kernel_records_total",
        ):
            assert _query(base, name), name
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
        agent.stop()
