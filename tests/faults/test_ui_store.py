"""uid 65534 writes into a store that root's `gpu-agent ui --profiles DIR` serves (a
sticky directory, as /tmp: others may add files), or owns the store itself (issue 44
item 3). Each read of a store file is bounded in bytes read, inflated and objects
kept, and what is served is streamed: the UI's peak RSS (VmHWM) stays within
RSS_GROWTH_MIB of what it had before, a bad file is one line, and the others are
still served. A store another user owns or may write (not sticky) is refused."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import tempfile
import textwrap
import time
import zlib
from pathlib import Path

from . import attacker as A

from support.agent import StderrLines
from support.env import agent_cmd
from support.ui import Ui, http_get

# What the UI may grow by while it serves a hostile file. Before the bounds: 500 000
# track descriptors +648 MiB, a 2 GiB file served +2 GiB, a 1 GiB gzip bomb +1 GiB.
RSS_GROWTH_MIB = 120
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the names below
TRACKS = "gpu-20260101T000000-000000001.perfetto-trace"
SPARSE = "gpu-20260101T000000-000000002.perfetto-trace"
SMALL = "gpu-20260101T000000-000000003.perfetto-trace"
BOMB = "gpu-20260101T000000-000000004.pb.gz"
HONEST = "gpu-20260101T000000-000000005.pb.gz"

# nobody writes each (name, size or -1) from stdin's parts into the store; size: sparse
WRITE = textwrap.dedent("""
    import json, os, sys
    d = sys.argv[1]
    data = sys.stdin.buffer.read()
    for name, start, end, sparse in json.loads(sys.argv[2]):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data[start:end])
            if sparse:
                f.truncate(sparse)
""")


def hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def sticky_store(world_dir: Path) -> Path:
    store = Path(tempfile.mkdtemp(dir=world_dir, prefix="ui-store-"))
    os.chmod(store, 0o1777)  # root's, others may add files (store.dir_error accepts it)
    return store


def write_as_nobody(store: Path, files: list[tuple[str, bytes, int]]) -> None:
    """files: (name, bytes, sparse size or 0), each created by uid 65534."""
    spec, blob = [], b""
    for name, data, sparse in files:
        spec.append((name, len(blob), len(blob) + len(data), sparse))
        blob += data
    w = subprocess.run(
        ["/usr/bin/python3", "-c", WRITE, str(store), json.dumps(spec)],
        input=blob,
        capture_output=True,
        timeout=120,
        preexec_fn=A.as_nobody,
    )
    assert w.returncode == 0, w.stderr


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def many_tracks(n: int) -> bytes:
    """n TracePackets of one TrackDescriptor each (uuid, parent 1): ~10 bytes apiece."""
    out = []
    for i in range(n):
        desc = b"\x08" + _varint(i + 2) + b"\x28\x01"  # uuid, parent_uuid
        packet = b"\xe2\x03" + _varint(len(desc)) + desc  # TracePacket.track_descriptor (60)
        out.append(b"\x0a" + _varint(len(packet)) + packet)
    return b"".join(out)


def honest_pprof() -> bytes:
    """One sample of 1 234 GPU ns, as `gpu-agent run` types its windows."""
    from gpu_agent.proto import profile_pb2

    p = profile_pb2.Profile()
    p.string_table.extend(["", "gpu_time", "nanoseconds", "kernel_launches", "count", "honest_kernel"])
    p.sample_type.add(type=1, unit=2)
    p.sample_type.add(type=3, unit=4)
    p.function.add(id=1, name=5, system_name=5)
    p.location.add(id=1).line.add(function_id=1)
    p.sample.add(location_id=[1], value=[1234, 1])
    return gzip.compress(p.SerializeToString())


def gzip_bomb(gib: int) -> bytes:
    """gib GiB of zeros, gzipped (about 1 MiB a GiB)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (16 << 20)
    return b"".join([z.compress(zeros) for _ in range(gib * 64)] + [z.flush()])


def stream_len(port: int, path: str) -> tuple[int, int, bytes]:
    """(status, bytes read to the end, its last 64 bytes), read 1 MiB at a time."""
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("GET", path)
        r = c.getresponse()
        n, tail = 0, b""
        while chunk := r.read(1 << 20):
            n += len(chunk)
            tail = (tail + chunk)[-64:]
        assert int(r.getheader("Content-Length")) == n, (r.getheader("Content-Length"), n)
        return r.status, n, tail
    finally:
        c.close()


def test_a_trace_of_many_track_descriptors_keeps_few(world_dir):
    """500 000 descriptors (4.6 MiB): the reader keeps 100 000 small tuples, says it
    ignored the rest, and answers in seconds (before: +648 MiB for 500 000; 6.8 M took
    the UI to 8.9 GB and 66-85 s)."""
    store = sticky_store(world_dir)
    write_as_nobody(store, [(TRACKS, many_tracks(500_000), 0)])
    ui = Ui(store)
    try:
        base = hwm_mib(ui.proc.pid)
        t0 = time.monotonic()
        status, _, body = http_get(ui.port, f"/api/timeline?file={TRACKS}")
        took = time.monotonic() - t0
        assert status == 200, body[:300]
        assert hwm_mib(ui.proc.pid) - base < RSS_GROWTH_MIB, (base, hwm_mib(ui.proc.pid))
        assert took < 20, took  # about 1.5 s here
        ignored = json.loads(body).get("ignored", "")
        assert ignored.startswith("400,000 track descriptors past 100,000 ignored"), ignored
    finally:
        ui.stop()


def test_a_huge_sparse_file_is_streamed(world_dir):
    """A 2 GiB sparse trace through /files and the range's download (with a small one
    after it): sent whole, from the file, at a few MiB of the UI's memory (before: the
    file read whole, +2 GiB)."""
    store = sticky_store(world_dir)
    small = b"\x0a\x02\x08\x01" * 16
    write_as_nobody(store, [(SPARSE, b"", 2 << 30), (SMALL, small, 0)])
    ui = Ui(store)
    try:
        base = hwm_mib(ui.proc.pid)
        status, n, _ = stream_len(ui.port, f"/files/{SPARSE}")
        assert (status, n) == (200, 2 << 30)
        assert hwm_mib(ui.proc.pid) - base < RSS_GROWTH_MIB, (base, hwm_mib(ui.proc.pid))
        status, n, tail = stream_len(ui.port, f"/download/trace.perfetto-trace?from={T0_MS - 1000}&to={T0_MS + 1000}")
        assert (status, n, tail) == (200, (2 << 30) + len(small), small[-64:])  # one after the other
        assert hwm_mib(ui.proc.pid) - base < RSS_GROWTH_MIB, (base, hwm_mib(ui.proc.pid))
        assert http_get(ui.port, f"/files/{SMALL}")[2] == small
    finally:
        ui.stop()


def unreadable(ui: Ui) -> dict:
    return json.loads(http_get(ui.port, "/api/status")[2])["ui"]["unreadable"]


def test_a_gzip_bomb_is_skipped_in_one_line(world_dir):
    """A 1 MiB pprof.gz that inflates to 1 GiB, decoded by the warmer at start: one
    line, counted, the UI's memory bounded, and the honest window still served
    (before: +1 GiB at start, before any request)."""
    store = sticky_store(world_dir)
    write_as_nobody(store, [(BOMB, gzip_bomb(1), 0), (HONEST, honest_pprof(), 0)])
    ui = Ui(store)
    try:
        deadline = time.monotonic() + 30  # the warmer reads it within a second or two
        while time.monotonic() < deadline and BOMB not in unreadable(ui):
            time.sleep(0.2)
        assert hwm_mib(ui.proc.pid) < 200, hwm_mib(ui.proc.pid)  # about 75 MiB
        skipped = [ln for ln in ui.lines if BOMB in ln] or [StderrLines(ui.proc).wait(BOMB, timeout=10)]
        assert skipped == [f"gpu-agent: warning: ui: skipped {BOMB}: inflates past 16 MiB, more than the UI reads\n"]
        frm, to = T0_MS - 1000, T0_MS + 1000
        status, _, body = http_get(ui.port, f"/api/range?from={frm}&to={to}")
        assert status == 200 and json.loads(body)["total"] == 1234, body[:300]
        assert json.loads(http_get(ui.port, "/api/status")[2])["ui"]["unreadable_files"] == 1
    finally:
        ui.stop()


def test_a_store_others_own_or_may_write_is_refused(world_dir):
    """nobody's store, or root's open to all (not sticky): one line, exit 2, nothing
    served. The same store of nobody's is the UI's when nobody ran it through sudo."""
    theirs = Path(tempfile.mkdtemp(dir=world_dir, prefix="ui-store-"))
    os.chown(theirs, A.NOBODY, A.NOBODY)
    theirs.chmod(0o755)
    loose = Path(tempfile.mkdtemp(dir=world_dir, prefix="ui-store-"))
    loose.chmod(0o777)
    env = {k: v for k, v in os.environ.items() if k not in ("SUDO_UID", "SUDO_GID")}
    for store, why in ((theirs, "is uid 65534's"), (loose, "is writable by group and others (mode 0777)")):
        p = subprocess.run(
            agent_cmd("ui", "--profiles", store, "--listen", "127.0.0.1:0"),
            capture_output=True,
            text=True,
            timeout=30,  # it exits at once (before: it served, and this expired)
            env=env,
        )
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith("gpu-agent: error: refusing the profile store: ") and why in p.stderr, p.stderr
    ui = subprocess.Popen(
        agent_cmd("ui", "--profiles", theirs, "--listen", "127.0.0.1:0"),
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "SUDO_UID": str(A.NOBODY), "SUDO_GID": str(A.NOBODY)},
    )
    try:
        assert " UI on http://" in ui.stderr.readline()
    finally:
        ui.terminate()
        ui.wait(timeout=30)
