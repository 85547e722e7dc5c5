"""End to end: mock GPU workloads in cgroups named like Kubernetes containers (containerd on
cgroup v2, docker-style on cgroup v1 where the host has it), a fake kubelet /pods on
localhost serving a real-shaped PodList, and the real `gpu-agent run`: the pprof samples
(and /metrics, when the agent has it) carry pod, namespace and container; a host process
carries none."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, agent_cmd, mock_env, need_ebpf
from support.pprof_tool import raw

CG = Path("/sys/fs/cgroup")


def _v2_root() -> Path | None:
    for d in (CG, CG / "unified"):
        if (d / "cgroup.controllers").exists():
            return d
    return None


def _v1_root() -> Path | None:
    d = CG / "pids"
    return d if (d / "cgroup.procs").exists() and not (d / "cgroup.controllers").exists() else None


class FakeCgroups:
    """Leaf cgroups created for the test under a private top directory, removed afterwards."""

    def __init__(self):
        self.tops: list[Path] = []

    def make(self, root: Path, rel: str) -> Path:
        top = root / f"gpu-agent-test-{uuid.uuid4().hex[:8]}"
        self.tops.append(top)
        leaf = top / rel
        leaf.mkdir(parents=True)
        return leaf

    def cleanup(self) -> None:
        for top in self.tops:
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)  # processes still leaving


def real_pod(name, ns, uid, container, runtime, cid):
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "resourceVersion": "1",
            "labels": {"app": name},
            "creationTimestamp": "2026-11-20T09:13:58Z",
        },
        "spec": {
            "nodeName": socket.gethostname(),
            "containers": [
                {
                    "name": container,
                    "image": "registry.example.com/ml/trainer:2.4",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "10.244.0.9",
            "qosClass": "BestEffort",
            "containerStatuses": [
                {
                    "name": container,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-11-20T09:14:03Z"}},
                    "image": "registry.example.com/ml/trainer:2.4",
                    "imageID": "registry.example.com/ml/trainer@sha256:" + "ab" * 32,
                    "containerID": f"{runtime}://{cid}",
                }
            ],
        },
    }


class Kubelet(http.server.ThreadingHTTPServer):
    def __init__(self, podlist: dict):
        body = json.dumps(podlist).encode()
        self.requests = 0

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(h):
                self.requests += 1
                if h.path != "/pods":
                    h.send_error(404)
                    return
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)

            def log_message(h, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/pods"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_has_metrics() -> bool:
    out = subprocess.run(agent_cmd("run", "--help"), capture_output=True, text=True).stdout
    return "--metrics-addr" in out


def workload_in(cgroup: Path | None, *args: str) -> subprocess.Popen:
    def enter():
        if cgroup is not None:
            with open(cgroup / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    return subprocess.Popen(
        [str(MOCK_APP), *args],
        env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)),
        preexec_fn=enter,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_pod_labels_on_profiles_and_metrics(tmp_path, built):
    need_ebpf()
    v2, v1 = _v2_root(), _v1_root()
    if v2 is None and v1 is None:
        pytest.fail("no writable cgroup hierarchy (v1 pids or v2) under /sys/fs/cgroup")
    cgs = FakeCgroups()
    uid_a, cid_a = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    uid_b, cid_b = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    pods = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": [
            real_pod("trainer-7d9f8c6b5-x2kqp", "ml-team", uid_a, "trainer", "containerd", cid_a),
            real_pod("inference-0", "serving", uid_b, "server", "docker", cid_b),
        ],
    }
    kubelet = Kubelet(pods)
    procs = []
    agent = None
    try:
        # containerd + systemd driver on cgroup v2 (else v1); docker + cgroupfs on v1 (else v2, CRI-O)
        u_a = uid_a.replace("-", "_")
        cg_a = cgs.make(
            v2 or v1,
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u_a}.slice/cri-containerd-{cid_a}.scope",
        )
        cg_b = (
            cgs.make(v1, f"kubepods/burstable/pod{uid_b}/{cid_b}")
            if v1 is not None
            else cgs.make(
                v2,
                f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                f"{uid_b.replace('-', '_')}.slice/crio-{cid_b}.scope",
            )
        )
        metrics_port = free_port() if agent_has_metrics() else None
        out_dir = tmp_path / "profiles"
        cmd = [
            "run",
            "--output-dir",
            out_dir,
            "--interval",
            "1s",
            "--kube-pods-url",
            kubelet.url,
            "--kube-refresh",
            "1s",
        ]
        if metrics_port:
            cmd += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
        agent = subprocess.Popen(agent_cmd(*cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        seen = []
        for line in agent.stderr:
            seen.append(line)
            if "watching every process" in line:  # not "also watching" a copy
                break
        else:
            pytest.fail("agent did not start: " + "".join(seen))
        assert any("pod labels from " + kubelet.url in s for s in seen), seen
        a = workload_in(cg_a, "--paths", "cuLaunchKernel", "--duration", "3", "--sleep-ms", "2")
        b = workload_in(cg_b, "--paths", "cudaLaunchKernel", "--duration", "3", "--sleep-ms", "2")
        host = workload_in(None, "--paths", "cuLaunchKernelEx", "--duration", "3", "--sleep-ms", "2")
        procs = [a, b, host]
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read()
        time.sleep(2.0)
        metrics = ""
        if metrics_port:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
        agent.send_signal(15)
        _, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        kubelet.shutdown()
        cgs.cleanup()
    samples = [s for f in sorted(out_dir.glob("*.pb.gz")) for s in raw(f)]
    by_pid = {}
    for s in samples:
        by_pid.setdefault(s.labels["pid"], []).append(s.labels)
    want = {
        str(a.pid): {"pod": "trainer-7d9f8c6b5-x2kqp", "namespace": "ml-team", "container": "trainer"},
        str(b.pid): {"pod": "inference-0", "namespace": "serving", "container": "server"},
        str(host.pid): {},
    }
    for pid, labels in want.items():
        assert pid in by_pid, f"no samples for pid {pid}"
        for got in by_pid[pid]:
            assert {k: got[k] for k in ("pod", "namespace", "container") if k in got} == labels, (pid, got)
    assert kubelet.requests >= 1
    if metrics_port:

        def series(pod):
            return [ln for ln in metrics.splitlines() if not ln.startswith("#") and f'pod="{pod}"' in ln]

        a_lines = series("trainer-7d9f8c6b5-x2kqp")
        assert a_lines and all('namespace="ml-team"' in ln and 'container="trainer"' in ln for ln in a_lines), metrics
        assert series("inference-0"), metrics
        host_lines = [ln for ln in metrics.splitlines() if f'pid="{host.pid}"' in ln]
        assert host_lines and all(re.search(r'pod=""|^(?!.*pod=)', ln) for ln in host_lines), host_lines
