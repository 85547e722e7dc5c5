"""Export to Parca / OTLP without BPF: encoders, the send queue, TLS and bearer tokens,
against in-process gRPC servers built from the same .proto modules."""

from __future__ import annotations

import gzip
import logging
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.grpc_backends import Backend, make_ca
from support.pprof_tool import raw

from gpu_agent.profile.interval import IntervalProfiles, IntervalStats
from gpu_agent.outputs.export import otlp, parca
from gpu_agent.outputs.export.backends import QueueOptions, make_backend
from gpu_agent.outputs.export.endpoint import TransportOptions, parse_endpoint
from gpu_agent.outputs.export.queue import SendError, SendQueue
from gpu_agent.profile.pprof import FrameSpec, ProfileBuilder

REPO = Path(__file__).resolve().parent.parent


@dataclass
class FakeProc:
    pid: int
    comm: str
    pod: dict = field(default_factory=dict)


def fake_window() -> IntervalProfiles:
    """Two processes; pid 200 is in a pod."""
    procs = {
        100: FakeProc(100, "trainer"),
        200: FakeProc(200, "server", {"pod": "web-0", "namespace": "prod", "container": "app"}),
    }
    combined = ProfileBuilder(1, 10**9, 1_700_000_000 * 10**9)
    w = IntervalProfiles(combined, IntervalStats(processes=2, kernels=3))
    for pid, kernel, ns, n in (
        (100, "_Z6k_gemmPfi", 5000, 2),
        (100, "_Z7k_relu1Pf", 700, 1),
        (200, "_Z6k_gemmPfi", 3000, 4),
    ):
        b = w.per_pid.setdefault(pid, ProfileBuilder(1, 10**9, 1_700_000_000 * 10**9))
        w.procs[pid] = procs[pid]
        frames = [FrameSpec.kernel(kernel), FrameSpec.marker("[unsampled]")]
        labels = {"pid": str(pid), "comm": procs[pid].comm, "cuda_device": "0", "cuda_stream": "7"}
        b.add(frames, ns, n, labels)
        combined.add(frames, ns, n, labels)
    return w


# -- encoders -------------------------------------------------------------------


def test_parca_request_decodes_with_labels_and_pprof_payloads(tmp_path):
    req = parca.pb.WriteRawRequest.FromString(parca.encode(fake_window(), "node-a", {"cluster": "c1"}))
    assert len(req.series) == 2
    by_pid = {}
    for s in req.series:
        labels = {l.name: l.value for l in s.labels.labels}
        by_pid[labels["pid"]] = (labels, s.samples)
    l100, samples100 = by_pid["100"]
    assert l100 == {"__name__": "gpu_time", "node": "node-a", "pid": "100", "comm": "trainer", "cluster": "c1"}
    l200, samples200 = by_pid["200"]
    assert l200["pod"] == "web-0" and l200["namespace"] == "prod" and l200["container"] == "app"
    # each raw_profile is a gzip pprof that Go's pprof reads
    path = tmp_path / "p100.pb.gz"
    path.write_bytes(samples100[0].raw_profile)
    assert samples100[0].raw_profile[:2] == b"\x1f\x8b"
    got = {s.system_names[0]: s.values for s in raw(path)}
    assert got == {"_Z6k_gemmPfi": [5000, 2], "_Z7k_relu1Pf": [700, 1]}


def test_parca_user_label_cannot_replace_the_profile_name():
    labels = dict(parca.series_labels("n", 1, "c", {}, {"node": "override", "x": "1"}))
    assert labels["__name__"] == "gpu_time" and labels["node"] == "override" and labels["x"] == "1"


def test_otlp_request_decodes_with_dictionary_and_attributes(tmp_path):
    data = otlp.encode(fake_window(), "node-a", {"cluster": "c1"}, include_pprof=True)
    req = otlp.svc.ExportProfilesServiceRequest.FromString(data)
    d = req.dictionary
    # every dictionary table starts with its zero value
    assert d.string_table[0] == "" and len(d.mapping_table[0].ListFields()) == 0
    assert len(d.location_table[0].ListFields()) == 0 and len(d.stack_table[0].ListFields()) == 0
    assert len(d.attribute_table[0].ListFields()) == 0 and len(d.function_table[0].ListFields()) == 0
    assert len(req.resource_profiles) == 2
    s = list(d.string_table)
    totals = {}
    for rp in req.resource_profiles:
        attrs = {kv.key: (kv.value.string_value or kv.value.int_value) for kv in rp.resource.attributes}
        assert attrs["host.name"] == "node-a" and attrs["cluster"] == "c1"
        if attrs["process.pid"] == 200:
            assert attrs["k8s.pod.name"] == "web-0" and attrs["k8s.namespace.name"] == "prod"
            assert attrs["k8s.container.name"] == "app"
        profs = rp.scope_profiles[0].profiles
        assert [(s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex]) for p in profs] == [
            ("gpu_time", "nanoseconds"),
            ("kernel_launches", "count"),
        ]
        assert profs[0].original_payload_format == "pprof"
        assert gzip.decompress(profs[0].original_payload)
        for p in profs:
            for smp in p.samples:
                stack = d.stack_table[smp.stack_index]
                leaf = d.location_table[stack.location_indices[0]]
                fn = d.function_table[leaf.lines[0].function_index]
                sample_attrs = {
                    s[d.attribute_table[i].key_strindex]: d.attribute_table[i].value.string_value
                    for i in smp.attribute_indices
                }
                assert sample_attrs["cuda_device"] == "0" and sample_attrs["pid"] == str(attrs["process.pid"])
                key = (attrs["process.pid"], s[fn.system_name_strindex], s[p.sample_type.type_strindex])
                totals[key] = totals.get(key, 0) + sum(smp.values)
    assert totals == {
        (100, "_Z6k_gemmPfi", "gpu_time"): 5000,
        (100, "_Z6k_gemmPfi", "kernel_launches"): 2,
        (100, "_Z7k_relu1Pf", "gpu_time"): 700,
        (100, "_Z7k_relu1Pf", "kernel_launches"): 1,
        (200, "_Z6k_gemmPfi", "gpu_time"): 3000,
        (200, "_Z6k_gemmPfi", "kernel_launches"): 4,
    }
    # the kernel function is shared across both processes in the one dictionary
    assert sum(1 for f in d.function_table if s[f.system_name_strindex] == "_Z6k_gemmPfi") == 1


def test_generated_parca_modules_match_the_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    out = tmp_path / "gen"
    out.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(REPO / "agent"),
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(REPO / "agent/gpu_agent/proto/parca_profilestore.proto"),
        ],
        check=True,
    )
    for name in ("parca_profilestore_pb2.py", "parca_profilestore_pb2_grpc.py"):
        assert (out / "gpu_agent/proto" / name).read_text() == (REPO / "agent/gpu_agent/proto" / name).read_text(), (
            f"{name} is stale: run `make proto`"
        )


def test_endpoints_parse():
    assert str(parse_endpoint("grpc://parca:7070")) == "grpc://parca:7070"
    e = parse_endpoint("grpcs://[::1]:443")
    assert e.tls and e.host == "::1" and e.target == "[::1]:443"
    for bad in ("http://x:1", "grpc://x", "grpc://x:1/path", "x:1"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


# -- the send queue ----------------------------------------------------------------


class FlakySend:
    def __init__(self):
        self.fail_with = None
        self.sent = []
        self.calls = 0
        self.times = []

    def __call__(self, item):
        self.calls += 1
        self.times.append(time.monotonic())
        if self.fail_with:
            raise SendError(self.fail_with, "test")
        self.sent.append(item)


def test_queue_drop_oldest_is_bounded_and_counts_every_drop():
    send = FlakySend()
    send.fail_with = "UNAVAILABLE"
    q = SendQueue("t", send, max_items=3, backoff_initial=0.02, backoff_max=0.05)
    for i in range(50):
        q.put(b"%d" % i)
        assert q.snapshot().depth <= 3 + 1  # waiting + in flight
    end = time.monotonic() + 5  # two failed sends (it was a 0.2 s sleep: a loaded host's thread can miss it)
    while q.snapshot().failures.get("UNAVAILABLE", 0) < 2 and time.monotonic() < end:
        time.sleep(0.01)
    send.fail_with = None
    end = time.monotonic() + 5
    while q.snapshot().depth and time.monotonic() < end:
        time.sleep(0.01)
    s = q.snapshot()
    q.close(1)
    assert s.depth == 0
    assert s.sent + sum(s.dropped.values()) == 50  # every profile either sent or counted
    assert s.dropped["queue_full"] >= 46
    assert send.sent[-1] == b"49"  # the newest survive
    assert s.failures["UNAVAILABLE"] >= 2


def test_queue_backoff_grows_exponentially_with_jitter():
    q = SendQueue("t", lambda b: None, backoff_initial=0.5, backoff_max=30, rng=random.Random(1))
    for attempt in range(1, 12):
        cap = min(30, 0.5 * 2 ** (attempt - 1))
        d = [q.backoff(attempt) for _ in range(200)]
        assert all(cap / 2 <= x <= cap for x in d)
        assert max(d) - min(d) > cap * 0.3  # jittered, not constant
    q.close(0)


def test_queue_backpressure_reports_full_without_dropping():
    send = FlakySend()
    send.fail_with = "UNAVAILABLE"
    q = SendQueue("t", send, max_items=2, policy="backpressure", backoff_initial=0.01, backoff_max=0.02)
    q.put(b"a")
    end = time.monotonic() + 5  # "a" in flight, retried (a 50 ms sleep was not always enough for the sender)
    while not send.calls and time.monotonic() < end:
        time.sleep(0.01)
    q.put(b"b")
    q.put(b"c")
    assert not q.has_room()
    s = q.snapshot()
    assert sum(s.dropped.values()) == 0
    send.fail_with = None
    end = time.monotonic() + 5
    while not q.has_room() and time.monotonic() < end:
        time.sleep(0.01)
    assert q.has_room()
    q.close(2)
    assert send.sent == [b"a", b"b", b"c"]


def test_auth_error_is_logged_once_and_not_retried_hot(caplog):
    send = FlakySend()
    send.fail_with = "UNAUTHENTICATED"
    caplog.set_level(logging.WARNING, logger="gpu_agent.export")
    q = SendQueue("t", send, max_items=4, backoff_initial=0.01, backoff_max=0.5)
    for i in range(4):
        q.put(b"x")
    time.sleep(1.2)
    q.close(0)
    # with a 10 ms initial backoff a transient error would be retried ~7 times in 1.2 s
    assert 2 <= send.calls <= 4, send.calls
    assert all(b - a >= 0.24 for a, b in zip(send.times, send.times[1:]))
    msgs = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(msgs) == 1 and "--bearer-token-file" in msgs[0]


def test_rejected_profile_is_dropped_not_retried():
    send = FlakySend()
    send.fail_with = "INVALID_ARGUMENT"
    q = SendQueue("t", send, backoff_initial=0.01)
    q.put(b"bad")
    end = time.monotonic() + 2
    while q.snapshot().depth and time.monotonic() < end:
        time.sleep(0.01)
    q.close(0)
    assert send.calls == 1 and q.snapshot().dropped == {"rejected": 1}


# -- through gRPC: TLS with a self-signed CA, bearer token ---------------------------


def _send_one(kind, url, tmp_path, **topts):
    qo = QueueOptions(max_items=4, backoff_initial=0.05, backoff_max=0.2)
    b = make_backend(kind, parse_endpoint(url), TransportOptions(timeout_s=5, **topts), qo, "node-a", {})
    b.submit(fake_window())
    return b


def _drained(b, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = b.queue.snapshot()
        if s.sent or s.dropped:
            return s
        time.sleep(0.02)
    return b.queue.snapshot()


@pytest.mark.parametrize("kind", ["parca", "otlp"])
def test_tls_with_own_ca_and_checked_bearer_token(tmp_path, kind):
    ca = make_ca(tmp_path / "ca")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    srv = Backend(token="s3cret", tls=(ca["cert"], ca["key"])).start()
    try:
        b = _send_one(
            kind, f"grpcs://localhost:{srv.port}", tmp_path, ca_file=str(ca["ca"]), bearer_token_file=str(token)
        )
        s = _drained(b)
        b.close(1)
        assert s.sent == 1, s
        reqs = srv.rec.parca if kind == "parca" else srv.rec.otlp
        assert len(reqs) == 1 and srv.rec.auth_failures == 0
    finally:
        srv.stop()


def test_wrong_token_is_refused_and_reported(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpu_agent.export")
    token = tmp_path / "token"
    token.write_text("wrong")
    srv = Backend(token="s3cret").start()
    try:
        b = _send_one("parca", f"grpc://127.0.0.1:{srv.port}", tmp_path, bearer_token_file=str(token))
        end = time.monotonic() + 10
        while not b.queue.snapshot().failures and time.monotonic() < end:
            time.sleep(0.02)
        # the token file is rotated: the next (slow) retry picks it up
        token.write_text("s3cret")
        s = _drained(b)
        b.close(1)
        assert s.failures.get("UNAUTHENTICATED", 0) >= 1 and s.sent == 1
        assert srv.rec.auth_failures >= 1 and len(srv.rec.parca) == 1
        assert sum("authentication failed" in r.getMessage() for r in caplog.records) == 1
    finally:
        srv.stop()


def test_tls_unknown_ca_fails_and_insecure_skip_verify_works(tmp_path):
    ca = make_ca(tmp_path / "ca")
    srv = Backend(tls=(ca["cert"], ca["key"])).start()
    try:
        b = _send_one("otlp", f"grpcs://localhost:{srv.port}", tmp_path)  # system CAs only
        end = time.monotonic() + 10
        while not b.queue.snapshot().failures and time.monotonic() < end:
            time.sleep(0.02)
        s = b.queue.snapshot()
        b.close(0)
        assert s.sent == 0 and s.failures.get("UNAVAILABLE", 0) >= 1
        assert not srv.rec.otlp
        b = _send_one("otlp", f"grpcs://localhost:{srv.port}", tmp_path, insecure_skip_verify=True)
        s = _drained(b)
        b.close(1)
        assert s.sent == 1 and len(srv.rec.otlp) == 1
    finally:
        srv.stop()
