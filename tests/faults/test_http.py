"""The agent's HTTP surfaces (`run --ui`, /metrics) against uid 65534 on the same
host (issue 30): it read root's 0600 profiles through the loopback UI, and slow
connections took the agent to 1 024 fds and 926 threads, after which it dropped
profiles while `gpu-agent health` said healthy."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

from .faultkit import Node
from . import attacker as A

from support.env import need_ebpf, private_shim

AS_NOBODY = textwrap.dedent("""
    import http.client, socket, sys, threading, time
    port, mport, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if mode == "read":
        for path in ("/api/status", "/api/range", "/api/sandwich?name=main", "/api/traces",
                     "/api/timeline?file=gpu-20260101T000000-000000000.perfetto-trace",
                     "/download/profile.pb.gz", "/"):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", path)
            r = c.getresponse()
            print(path, r.status, len(r.read()))
    else:  # slow: hold many idle connections to both servers, all asked for at once
        socks, lock = [], threading.Lock()

        def connect(p):
            try:
                c = socket.create_connection(("127.0.0.1", p), timeout=5)
            except OSError:
                return
            with lock:
                socks.append(c)
        ts = [threading.Thread(target=connect, args=(p,)) for p in (port, mport) for _ in range(60)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        print("held", len(socks), flush=True)
        time.sleep(float(sys.argv[4]))
""")


def as_nobody(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/usr/bin/python3", "-c", AS_NOBODY, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=A.as_nobody,
    )


def threads_and_fds(pid: int) -> tuple[int, int]:
    """The agent's threads and fds, the least of five readings 0.2 s apart: what it
    holds, not what it opens and closes meanwhile (a profile written, /proc read:
    a loaded two-worker run read 32 more fds once, and one thread more)."""
    readings = []
    for _ in range(5):
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        readings.append((int(re.search(r"Threads:\s+(\d+)", status).group(1)), fds))
        time.sleep(0.2)
    return min(r[0] for r in readings), min(r[1] for r in readings)


def fd_kinds(pid: int) -> Counter:
    """What the agent's fds are, for a failure's message."""
    kinds = Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            kinds[re.sub(r"[:\[].*", "", os.readlink(fd))] += 1
        except OSError:
            pass
    return kinds


def root_get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        r.read()
        return r.status


def test_the_loopback_ui_serves_root_not_another_local_user(tmp_path, built, honest):
    need_ebpf()
    # Its own shim copy: the agent's threads and fds are counted below, and another
    # agent's process that it attached (the other worker's, in a two-worker run) added
    # fds of its own (82 -> 104 against a bound of 20 more)
    shim = private_shim(tmp_path / "shim")
    h = honest(
        "--paths", "cuLaunchKernel", "--duration", "3", "--sleep-ms", "5", env={"CUDA_INJECTION64_PATH": str(shim)}
    )  # a profile to read
    # and no discovery: the other worker's processes map the shared shim, and attaching
    # them added their uprobes' fds (79 -> 112 in a two-worker run)
    node = Node(tmp_path / "profiles", "--ui", "127.0.0.1:0", "--shim", shim, "--discover-interval", "0")
    try:
        url = next(ln[ln.index("http://") :].split()[0] for ln in node.agent.start_lines if " UI on http://" in ln)
        port = urllib.parse.urlsplit(url).port
        mport = urllib.parse.urlsplit(node.metrics_url).port
        h.wait()
        time.sleep(1.5)
        assert root_get(url + "api/status") == 200 and root_get(url + "api/range") == 200
        p = as_nobody(str(port), str(mport), "read")
        assert p.returncode == 0, p.stderr
        got = dict(line.split()[:2] for line in p.stdout.splitlines())
        assert got == {
            "/api/status": "403",
            "/api/range": "403",
            "/api/sandwich?name=main": "403",
            "/api/traces": "403",
            "/api/timeline?file=gpu-20260101T000000-000000000.perfetto-trace": "403",
            "/download/profile.pb.gz": "403",
            "/": "403",
        }, p.stdout

        # Slow connections: 120 asked for at once (a thread each: one after another,
        # those past the backlog waited out their timeouts, 18 s) and held idle by
        # nobody; the agent's threads and fds stay bounded, and root is still served.
        before = threads_and_fds(node.proc.pid)
        slow = subprocess.Popen(
            ["/usr/bin/python3", "-c", AS_NOBODY, str(port), str(mport), "slow", "8"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=A.as_nobody,
        )
        held = slow.stdout.readline()  # each server's per-peer allowance filled, at least
        assert held.startswith("held") and int(held.split()[1]) >= 2 * 8, (held, slow.stderr.read())
        time.sleep(1.0)
        during = threads_and_fds(node.proc.pid)
        assert during[0] - before[0] <= 2 * 8 + 2 and during[1] - before[1] <= 2 * 8 + 4, (
            before,
            during,
            fd_kinds(node.proc.pid),
        )
        assert root_get(url + "api/status") == 200
        assert root_get(node.metrics_url) == 200
        slow.kill()  # its connections close with it: what they did is measured
        slow.wait(timeout=60)
    finally:
        node.stop()
