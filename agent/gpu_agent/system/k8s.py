"""Kubernetes metadata: PID -> cgroup -> container ID -> pod name, namespace, container.

The one entry point the rest of the agent uses is `proc_labels(pid) -> dict`:
`{"pod": ..., "namespace": ..., "container": ...}` for a process that runs in a
Kubernetes container whose pod this node's pod list knows, `{}` otherwise
(outside Kubernetes, for host processes, or while metadata is off). The
collector puts these labels on every pprof sample; /metrics uses the same call.

Steps:
  1. /proc/PID/cgroup (read once per process, while it is alive) -> container ID
     and pod UID: containerd, CRI-O, docker/cri-dockerd and podman cgroup names,
     systemd and cgroupfs drivers, cgroup v1, v2 and hybrid (`parse_cgroup`).
  2. The pods on this node, as a PodList: the API server filtered by
     spec.nodeName (the default inside a cluster), or the kubelet's /pods
     endpoint (`--kube-pods-url`). It is fetched on a background thread every
     `--kube-refresh` seconds, and early (rate-limited) when a process names a
     container the last list did not have, so new pods get labels within seconds
     without the profiling loop ever waiting on the network.
  3. container ID -> (namespace, pod, container); a pod UID alone (the container
     has no status yet) still gives namespace and pod.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Optional

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# A 64-hex container ID inside one cgroup path component, with the runtime its
# name shows. conmon (CRI-O's monitor) scopes are not containers: skipped.
_ID = r"([0-9a-f]{64})"
_COMPONENT_RES = [
    (re.compile(r"^cri-containerd-" + _ID + r"\.scope$"), "containerd"),
    (re.compile(r"^crio-conmon-" + _ID + r"(\.scope)?$"), None),
    (re.compile(r"^crio-" + _ID + r"(\.scope)?$"), "cri-o"),
    (re.compile(r"^docker-" + _ID + r"\.scope$"), "docker"),
    (re.compile(r"^libpod-conmon-" + _ID + r"(\.scope)?$"), None),
    (re.compile(r"^libpod-" + _ID + r"(\.scope)?$"), "podman"),
    (re.compile(r"^" + _ID + r"$"), ""),  # cgroupfs driver: runtime from the parent
]
# Pod UID: cgroupfs `pod1b2c...-...`, systemd `kubepods-burstable-pod1b2c..._..._....slice`.
_POD_RE = re.compile(
    r"(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$"
)


@dataclass(frozen=True)
class CgroupRef:
    container_id: Optional[str]  # 64 hex, no runtime prefix
    runtime: Optional[str]  # containerd, cri-o, docker, podman, or None when the name does not say
    pod_uid: Optional[str]  # dashed UID from a kubepods path, or None outside Kubernetes


def _runtime_from_parents(parts: list[str]) -> Optional[str]:
    joined = "/".join(parts)
    if "docker" in joined:
        return "docker"
    if "containerd" in joined:
        return "containerd"
    if "crio" in joined:
        return "cri-o"
    return None


def parse_cgroup_path(path: str) -> CgroupRef:
    """One cgroup path (v1 or v2) -> what it says about container and pod.

    Walks from the leaf up: the innermost container ID, then the pod above it."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    cid = runtime = pod = None
    for i in range(len(parts) - 1, -1, -1):
        comp = parts[i]
        if cid is None:
            for rx, rt in _COMPONENT_RES:
                m = rx.match(comp)
                if m:
                    if rt is None:  # a runtime monitor's scope (conmon), not the container
                        return CgroupRef(None, None, None)
                    cid, runtime = m.group(1), (rt or _runtime_from_parents(parts[:i]))
                    break
            if cid is not None:
                continue
        m = _POD_RE.search(comp)
        if m:
            pod = m.group(1).replace("_", "-")
            break
    return CgroupRef(cid, runtime, pod)


def parse_cgroup(text: str) -> CgroupRef:
    """/proc/PID/cgroup contents (v1 `N:ctrl:/path` lines, v2 `0::/path`, or both) -> CgroupRef.

    The first line naming a container wins; a line naming only a pod is kept as
    a fallback. Paths seen through a private cgroup namespace (`/../../x`) work:
    only the last components matter."""
    best = CgroupRef(None, None, None)
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        ref = parse_cgroup_path(fields[2])
        if ref.container_id:
            if ref.pod_uid is None and best.pod_uid is not None:
                ref = CgroupRef(ref.container_id, ref.runtime, best.pod_uid)
            return ref
        if ref.pod_uid and best.pod_uid is None:
            best = ref
    return best


def read_cgroup(pid: int, proc_root: str = "/proc") -> Optional[CgroupRef]:
    try:
        with open(f"{proc_root}/{pid}/cgroup") as f:
            return parse_cgroup(f.read())
    except OSError:
        return None


# -- the pods on this node ----------------------------------------------------


@dataclass(frozen=True)
class PodIndex:
    by_container: dict  # container id -> (namespace, pod, container)
    by_uid: dict  # pod uid -> (namespace, pod)

    @classmethod
    def empty(cls) -> "PodIndex":
        return cls({}, {})

    @classmethod
    def from_podlist(cls, podlist: dict) -> "PodIndex":
        by_container, by_uid = {}, {}
        for pod in podlist.get("items") or []:
            meta = pod.get("metadata") or {}
            name, ns, uid = meta.get("name"), meta.get("namespace", "default"), meta.get("uid")
            if not name:
                continue
            if uid:
                by_uid[uid] = (ns, name)
            status = pod.get("status") or {}
            for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
                for cs in status.get(key) or []:
                    cid = cs.get("containerID") or ""
                    if "://" in cid:
                        cid = cid.split("://", 1)[1]
                    if cid:
                        by_container[cid] = (ns, name, cs.get("name", ""))
        return cls(by_container, by_uid)


def in_cluster_url(node_name: Optional[str]) -> Optional[str]:
    """The API server's pod list for this node, when running in a pod with a service account."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not node_name or not os.path.exists(f"{SA_DIR}/token"):
        return None
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}"


class PodSource:
    """Fetches a PodList from the API server or the kubelet, with the service account's token."""

    def __init__(
        self,
        url: str,
        token_file: Optional[str] = None,
        ca_file: Optional[str] = None,
        insecure: bool = False,
        timeout: float = 10.0,
    ):
        self.url = url
        self.token_file = token_file
        self.ca_file = ca_file
        self.insecure = insecure
        self.timeout = timeout

    def _context(self) -> Optional[ssl.SSLContext]:
        if not self.url.startswith("https:"):
            return None
        if self.insecure:  # the kubelet's serving certificate is often self-signed
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        if self.ca_file and os.path.exists(self.ca_file):
            return ssl.create_default_context(cafile=self.ca_file)
        return ssl.create_default_context()

    def fetch(self) -> dict:
        req = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        if self.token_file and os.path.exists(self.token_file):
            with open(self.token_file) as f:  # re-read: projected tokens rotate
                req.add_header("Authorization", "Bearer " + f.read().strip())
        with urllib.request.urlopen(req, timeout=self.timeout, context=self._context()) as r:
            return json.load(r)


class PodMetadata:
    """Cached pid -> labels, over a pod index refreshed on a background thread."""

    def __init__(
        self, source: PodSource, refresh_s: float = 30.0, min_refresh_s: float = 2.0, proc_root: str = "/proc", log=None
    ):
        self.source = source
        self.refresh_s = refresh_s
        self.min_refresh_s = min_refresh_s
        self.proc_root = proc_root
        self.index = PodIndex.empty()
        self.fetches = 0
        self.errors = 0
        self._log = log or (lambda msg: print(f"gpu-agent: {msg}", file=sys.stderr, flush=True))
        self._cgroups: dict[int, Optional[CgroupRef]] = {}
        self._labels: dict[int, dict] = {}
        self._dead: set[int] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._last_error: Optional[str] = None
        self._thread: Optional[threading.Thread] = None

    # -- refresh -------------------------------------------------------------
    def refresh(self) -> bool:
        try:
            podlist = self.source.fetch()
        except Exception as e:  # network, auth, JSON: keep the last good index
            self.errors += 1
            msg = f"{type(e).__name__}: {e}"
            if msg != self._last_error:
                self._log(
                    f"kubernetes pod list from {self.source.url} failed ({msg}); pod labels may be missing or stale"
                )
                self._last_error = msg
            return False
        self.index = PodIndex.from_podlist(podlist)  # one reference swap: readers never lock
        self.fetches += 1
        if self._last_error is not None:
            self._log(f"kubernetes pod list from {self.source.url} works again")
            self._last_error = None
        return True

    def start(self) -> "PodMetadata":
        self._thread = threading.Thread(target=self._loop, name="gpu-agent-k8s", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh()
            self.sweep()
            self._ready.set()
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            # a miss asked for an early refresh: never more often than min_refresh_s
            rest = self.min_refresh_s - (time.monotonic() - started)
            if rest > 0:
                self._stop.wait(rest)

    def sweep(self) -> None:
        """Forget processes that were already gone at the previous sweep (one refresh period
        ago: their last window has been written): memory stays flat, and a reused PID is
        looked up afresh."""
        dead = {pid for pid in list(self._cgroups) if not os.path.exists(f"{self.proc_root}/{pid}")}
        for pid in self._dead & dead:
            self.forget(pid)
        self._dead = dead

    # -- lookups (profiling thread) -------------------------------------------
    def cgroup(self, pid: int) -> Optional[CgroupRef]:
        if pid not in self._cgroups:
            self._cgroups[pid] = read_cgroup(pid, self.proc_root)
        return self._cgroups[pid]

    def proc_labels(self, pid: int) -> dict:
        done = self._labels.get(pid)
        if done is not None:
            return done
        ref = self.cgroup(pid)
        if ref is None or (ref.container_id is None and ref.pod_uid is None):
            return {}  # a host process, or gone before we saw it
        idx = self.index
        hit = idx.by_container.get(ref.container_id) if ref.container_id else None
        if hit is not None:
            labels = {"pod": hit[1], "namespace": hit[0], "container": hit[2]}
            self._labels[pid] = labels  # complete: final for this process
            return labels
        if ref.pod_uid is None:
            return {}  # a container outside Kubernetes (plain docker, podman, ctr)
        self._wake.set()  # a pod the last list did not have: refresh early
        pod = idx.by_uid.get(ref.pod_uid)
        return {"pod": pod[1], "namespace": pod[0]} if pod else {}

    def forget(self, pid: int) -> None:
        self._cgroups.pop(pid, None)
        self._labels.pop(pid, None)


# -- the module-level hook ------------------------------------------------------

_active: Optional[PodMetadata] = None


def configure(metadata: Optional[PodMetadata]) -> None:
    """Make `proc_labels` answer from this metadata (None: labels off)."""
    global _active
    _active = metadata


def proc_labels(pid: int) -> dict:
    """{"pod", "namespace", "container"} of a process, or {} outside Kubernetes / when off."""
    md = _active
    return md.proc_labels(pid) if md is not None else {}


def forget(pid: int) -> None:
    md = _active
    if md is not None:
        md.forget(pid)


def from_args(args) -> Optional[PodMetadata]:
    """PodMetadata for `gpu-agent run`'s --kube-* flags, or None when off/not in a cluster."""
    url = args.kube_pods_url
    if url == "off":
        return None
    token = args.kube_token_file
    ca = args.kube_ca_file
    if url == "auto":
        url = in_cluster_url(args.node_name or os.environ.get("NODE_NAME"))
        if url is None:
            return None
        token = token or f"{SA_DIR}/token"
        ca = ca or f"{SA_DIR}/ca.crt"
    elif url.startswith("https:"):
        token = token or (f"{SA_DIR}/token" if os.path.exists(f"{SA_DIR}/token") else None)
        ca = ca or (f"{SA_DIR}/ca.crt" if os.path.exists(f"{SA_DIR}/ca.crt") else None)
    source = PodSource(url, token_file=token, ca_file=ca, insecure=args.kube_insecure_skip_tls_verify)
    return PodMetadata(source, refresh_s=args.kube_refresh)
