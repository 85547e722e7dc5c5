"""/metrics behind --metrics-token-file (outputs/metrics.py), against uid 65534 on the
same host (issue 44): /metrics answered every local user with the pids, commands,
kernel names and pods of every profiled process, where the UI refused them. Without a
token file it stays open, as Prometheus's exporters are (docs/security.md); with one,
a scrape without its token, or with another, gets 401, and a token file another user
could read or swap is refused at start."""

from __future__ import annotations

import os
import subprocess
import textwrap
import urllib.error
import urllib.request

import pytest

from gpu_agent.outputs.metrics import Metrics, serve

from . import attacker as A

# nobody: GET /metrics with each Authorization given (none, a wrong token), print the codes
SCRAPE = textwrap.dedent("""
    import sys, urllib.error, urllib.request
    for auth in sys.argv[2:]:
        req = urllib.request.Request(sys.argv[1], headers={"Authorization": auth} if auth != "-" else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                print(r.status, len(r.read()))
        except urllib.error.HTTPError as e:
            print(e.code, len(e.read()))
""")


class _Proc:
    comm, pod = "victim", {}


def _metrics() -> Metrics:
    return Metrics(proc_info=lambda pid: _Proc(), kernel_name=lambda kid: "secret_kernel")


def _get(url: str, token: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_token_file_keeps_metrics_from_other_users(tmp_path):
    token = tmp_path / "metrics.token"
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    server, _t, (host, port) = serve(_metrics(), "127.0.0.1:0", str(token))
    url = f"http://{host}:{port}/metrics"
    try:
        p = subprocess.run(
            ["/usr/bin/python3", "-c", SCRAPE, url, "-", "Bearer wrong", "Basic czNjcmV0LXRva2Vu"],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=A.as_nobody,
        )
        assert p.returncode == 0, p.stderr
        assert [ln.split()[0] for ln in p.stdout.splitlines()] == ["401", "401", "401"], p.stdout
        assert "gpu_agent" not in p.stdout
        code, body = _get(url, "s3cret-token")  # Prometheus's authorization.credentials_file
        assert code == 200 and b"gpu_agent_process_resident_memory_bytes" in body, (code, body[:200])
        # rotated in place: the old token stops, the new one works, no restart
        token.write_text("rotated\n")
        os.utime(token, ns=(1, 1))
        assert _get(url, "s3cret-token")[0] == 401 and _get(url, "rotated")[0] == 200
        # a token file that goes away lets nobody in
        token.unlink()
        assert _get(url, "rotated")[0] == 401
    finally:
        server.shutdown()
        server.server_close()


def test_a_token_file_others_may_read_or_own_is_refused(tmp_path):
    loose = tmp_path / "loose.token"
    loose.write_text("t\n")
    loose.chmod(0o644)
    with pytest.raises(ValueError, match="no one else's"):
        serve(_metrics(), "127.0.0.1:0", str(loose))
    theirs = tmp_path / "theirs.token"
    theirs.write_text("t\n")
    theirs.chmod(0o600)
    os.chown(theirs, A.NOBODY, A.NOBODY)  # nobody's file: they could swap the token
    with pytest.raises(ValueError, match="no one else's"):
        serve(_metrics(), "127.0.0.1:0", str(theirs))
    fifo = tmp_path / "fifo.token"
    os.mkfifo(fifo, 0o600)  # opened without blocking, refused as no regular file
    with pytest.raises(ValueError, match="not a regular file"):
        serve(_metrics(), "127.0.0.1:0", str(fifo))
