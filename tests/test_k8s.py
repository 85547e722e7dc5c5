"""PID -> cgroup -> container ID -> pod: real-format cgroup files (containerd, CRI-O, docker;
cgroup v1, v2 and hybrid) and a real-shaped kubelet PodList. No eBPF, no root."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

import pytest

from gpu_agent.system import k8s

DATA = Path(__file__).resolve().parent / "data" / "k8s"
CD = "0a3bc3ee47f1b8a36f0b6d9a1c33e2bbf0ef3b5fbd2e5a1d2f4c6bc1e0a9d8f7"
CR = "5e2f7c1d9b8a4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f"
DK = "9f8e7d6c5b4a39281706f5e4d3c2b1a0918273645546372819a0b1c2d3e4f5a6"
U = "3e61c214-bc3e-4ac6-a9b3-6e7bd3d9a0c5"
V = "7b1d2c3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
W = "c0ffee00-1234-4567-89ab-cdef01234567"
PLAIN = "4d4d4d4d5e5e5e5e6f6f6f6f7a7a7a7a8b8b8b8b9c9c9c9cadadadadbebebebe"  # docker run, no Kubernetes

CASES = {
    # file: (container id, runtime, pod uid)
    "containerd-v2-systemd": (CD, "containerd", U),
    "containerd-v2-cgroupfs": (CD, None, U),  # the cgroupfs driver's name does not say the runtime
    "containerd-v1-cgroupfs": (CD, None, U),
    "containerd-v2-cgroupns": (CD, "containerd", U),
    "containerd-v2-kind": (CD, "containerd", U),
    "crio-v2-systemd": (CR, "cri-o", V),
    "crio-v1-systemd": (CR, "cri-o", V),
    "crio-v2-conmon": (None, None, None),
    "docker-k8s-v1-systemd": (DK, "docker", W),
    "docker-k8s-v2-cgroupfs": (DK, None, W),
    "docker-plain-v2-systemd": (PLAIN, "docker", None),
    "docker-plain-v1-cgroupfs": (PLAIN, "docker", None),
    "host-v2-session": (None, None, None),
    "host-v1-service": (None, None, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_cgroup_file(name):
    ref = k8s.parse_cgroup((DATA / "cgroup" / name).read_text())
    assert (ref.container_id, ref.runtime, ref.pod_uid) == CASES[name]


def test_every_cgroup_fixture_has_a_case():
    assert sorted(p.name for p in (DATA / "cgroup").iterdir()) == sorted(CASES)


def test_pod_only_cgroup_and_garbage():
    assert k8s.parse_cgroup(f"0::/kubepods/burstable/pod{U}\n").pod_uid == U
    assert k8s.parse_cgroup("").container_id is None
    assert k8s.parse_cgroup("not a cgroup file\n0::\n").container_id is None
    # a 64-hex name that is not under any runtime or pod: an ID, no runtime, no pod
    assert k8s.parse_cgroup(f"0::/default/{CD}\n") == k8s.CgroupRef(CD, None, None)


def podlist():
    return json.loads((DATA / "podlist.json").read_text())


def test_pod_index_from_real_shaped_podlist():
    idx = k8s.PodIndex.from_podlist(podlist())
    assert idx.by_container[CD] == ("ml-team", "trainer-7d9f8c6b5-x2kqp", "trainer")
    assert idx.by_container["2" * 64] == ("ml-team", "trainer-7d9f8c6b5-x2kqp", "log-shipper")
    assert idx.by_container["1" * 64] == ("ml-team", "trainer-7d9f8c6b5-x2kqp", "fetch-data")  # init
    assert idx.by_container[CR] == ("serving", "inference-0", "server")
    assert idx.by_container[DK] == ("batch", "legacy-job-abcde", "job")
    assert idx.by_uid["deadbeef-0000-4000-8000-00000000abcd"] == ("ml-team", "starting-pod")
    assert len(idx.by_container) == 5  # the pending pod's container has no ID yet


class FakeSource:
    url = "fake://pods"

    def __init__(self, data):
        self.data = data
        self.calls = 0

    def fetch(self):
        self.calls += 1
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


def fake_proc(tmp_path, files: dict[int, str]) -> str:
    for pid, name in files.items():
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "cgroup").write_text((DATA / "cgroup" / name).read_text())
    return str(tmp_path / "proc")


def test_proc_labels_per_runtime(tmp_path):
    root = fake_proc(
        tmp_path,
        {
            10: "containerd-v2-systemd",
            11: "crio-v1-systemd",
            12: "docker-k8s-v1-systemd",
            13: "host-v2-session",
            14: "docker-plain-v2-systemd",
            15: "crio-v2-conmon",
        },
    )
    md = k8s.PodMetadata(FakeSource(podlist()), proc_root=root, log=lambda m: None)
    assert md.refresh()
    assert md.proc_labels(10) == {"pod": "trainer-7d9f8c6b5-x2kqp", "namespace": "ml-team", "container": "trainer"}
    assert md.proc_labels(11) == {"pod": "inference-0", "namespace": "serving", "container": "server"}
    assert md.proc_labels(12) == {"pod": "legacy-job-abcde", "namespace": "batch", "container": "job"}
    assert md.proc_labels(13) == {}  # a host process
    assert md.proc_labels(14) == {}  # docker outside Kubernetes
    assert md.proc_labels(15) == {}  # conmon
    assert md.proc_labels(99) == {}  # no such process


def test_new_pod_gets_labels_after_refresh_and_cache_is_per_process(tmp_path):
    root = fake_proc(tmp_path, {20: "containerd-v2-systemd"})
    empty = {"kind": "PodList", "apiVersion": "v1", "items": []}
    src = FakeSource(empty)
    md = k8s.PodMetadata(src, proc_root=root, log=lambda m: None)
    md.refresh()
    assert md.proc_labels(20) == {}
    assert md._wake.is_set(), "a container of an unknown pod must ask for an early refresh"
    src.data = podlist()
    md.refresh()
    labels = md.proc_labels(20)
    assert labels["container"] == "trainer"
    src.data = empty
    md.refresh()
    assert md.proc_labels(20) == labels, "a process keeps its labels after its pod leaves the list"
    md.forget(20)
    assert 20 not in md._labels and 20 not in md._cgroups


def test_pod_uid_only_gives_pod_and_namespace(tmp_path):
    (tmp_path / "proc" / "30").mkdir(parents=True)
    (tmp_path / "proc" / "30" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddeadbeef_0000_4000_8000_00000000abcd.slice/"
        "cri-containerd-" + "3" * 64 + ".scope\n"
    )
    md = k8s.PodMetadata(FakeSource(podlist()), proc_root=str(tmp_path / "proc"), log=lambda m: None)
    md.refresh()
    assert md.proc_labels(30) == {"pod": "starting-pod", "namespace": "ml-team"}


def test_fetch_failure_keeps_the_last_index_and_logs_once(tmp_path):
    root = fake_proc(tmp_path, {40: "crio-v2-systemd"})
    src = FakeSource(podlist())
    logs = []
    md = k8s.PodMetadata(src, proc_root=root, log=logs.append)
    md.refresh()
    src.data = OSError("connection refused")
    assert not md.refresh() and not md.refresh()
    assert len(logs) == 1 and "connection refused" in logs[0]
    assert md.proc_labels(40)["pod"] == "inference-0"
    src.data = podlist()
    assert md.refresh() and "works again" in logs[-1]


def test_module_hook_is_empty_when_off():
    k8s.configure(None)
    assert k8s.proc_labels(1) == {}


class _PodsHandler(http.server.BaseHTTPRequestHandler):
    body = b""
    seen: list = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


def test_pod_source_http_with_token_and_background_refresh(tmp_path):
    _PodsHandler.body = (DATA / "podlist.json").read_bytes()
    _PodsHandler.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PodsHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    try:
        root = fake_proc(tmp_path, {50: "containerd-v1-cgroupfs"})
        src = k8s.PodSource(f"http://127.0.0.1:{srv.server_address[1]}/pods", token_file=str(token))
        md = k8s.PodMetadata(src, refresh_s=0.2, min_refresh_s=0.05, proc_root=root, log=lambda m: None).start()
        assert md.wait_ready(10)
        deadline = time.monotonic() + 10
        while md.fetches < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        md.stop()
        assert md.fetches >= 3, "the pod list is refreshed periodically"
        assert md.proc_labels(50)["pod"] == "trainer-7d9f8c6b5-x2kqp"
        assert _PodsHandler.seen[0] == ("/pods", "Bearer t0k3n")
    finally:
        srv.shutdown()


def test_in_cluster_url(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(k8s, "SA_DIR", str(tmp_path))
    assert k8s.in_cluster_url("gpu-node-1") is None  # no service-account token: not in a pod
    (tmp_path / "token").write_text("x")
    assert (
        k8s.in_cluster_url("gpu-node-1") == "https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-1"
    )
    assert k8s.in_cluster_url(None) is None


def test_sweep_forgets_processes_gone_for_a_whole_period(tmp_path):
    root = fake_proc(tmp_path, {60: "containerd-v2-systemd", 61: "crio-v2-systemd"})
    md = k8s.PodMetadata(FakeSource(podlist()), proc_root=root, log=lambda m: None)
    md.refresh()
    assert md.proc_labels(60) and md.proc_labels(61)
    import shutil

    shutil.rmtree(Path(root) / "60")
    md.sweep()
    assert md.proc_labels(60)["container"] == "trainer", "kept one more period: its last window still needs it"
    md.sweep()
    assert 60 not in md._cgroups and 61 in md._cgroups


def test_a_process_keeps_its_pod_after_k8s_forgot_it(tmp_path):
    """The interval of a process's last launches may be built after k8s's sweep forgot
    the process (a refresh after it was seen gone: one second under `--kube-refresh
    1s`; a held interval, a loaded agent): its ProcInfo keeps the labels it found
    complete. test_k8s_e2e's samples of an exited pod process once had none."""
    import shutil

    from gpu_agent.profile.interval import ProcInfo

    root = fake_proc(tmp_path, {70: "containerd-v2-systemd"})
    md = k8s.PodMetadata(FakeSource(podlist()), proc_root=root, log=lambda m: None)
    md.refresh()
    k8s.configure(md)
    try:
        info = ProcInfo(70, "trainer")
        want = {"pod": "trainer-7d9f8c6b5-x2kqp", "namespace": "ml-team", "container": "trainer"}
        assert info.pod == want  # first sight, while it runs
        shutil.rmtree(Path(root) / "70")
        md.sweep()
        md.sweep()  # gone for a whole period: forgotten
        assert k8s.proc_labels(70) == {}
        assert info.pod == want
    finally:
        k8s.configure(None)
