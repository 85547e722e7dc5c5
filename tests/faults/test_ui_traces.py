"""uid 65534 fills a store directory that root's `gpu-agent ui --profiles DIR` serves
with traces made to stall or bloat the Timeline tab's reader (ui/timeline.py): a
sparse 1 GiB file, a file that grows after the listing, a packet whose length runs
past the end, and 100 000 slices opened and never closed. Root's UI answers each
with one 400 line (its views and launch stacks too, from the error it keeps of the
one parse), stays small, and still serves an honest trace."""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

from . import attacker as A

from support.ui import Ui, http_get

NAMES = {
    "sparse": "gpu-20260101T000000-000000001.perfetto-trace",
    "cut": "gpu-20260101T000000-000000002.perfetto-trace",
    "nest": "gpu-20260101T000000-000000003.perfetto-trace",
    "grows": "gpu-20260101T000000-000000004.perfetto-trace",
}

WRITE = textwrap.dedent("""
    import os, sys
    d, sparse, cut, nest, grows = sys.argv[1:6]
    with open(os.path.join(d, sparse), "wb") as f:
        f.truncate(1 << 30)
    with open(os.path.join(d, cut), "wb") as f:
        f.write(b"\\x0a\\xff\\xff\\xff\\x7f" + b"x" * 64)
    open(os.path.join(d, nest), "wb").write(sys.stdin.buffer.read())
    with open(os.path.join(d, grows), "wb") as f:
        f.write(b"\\x0a\\x00")
""")


def nested_slices(n: int = 100_000) -> bytes:
    """n slices begun on one track and never ended, as Perfetto's protos write them."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    out = bytearray()
    for i in range(n):
        p = pb.TracePacket(timestamp=i, trusted_packet_sequence_id=1)
        p.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        p.track_event.track_uuid = 7
        p.track_event.name = "k"
        b = p.SerializeToString()
        out += b"\x0a" + bytes([len(b)]) + b
    return bytes(out)


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_hostile_traces_in_a_served_store_cost_the_ui_nothing(world_dir):
    store = Path(tempfile.mkdtemp(dir=world_dir, prefix="ui-store-"))
    os.chmod(store, 0o1777)  # sticky, as /tmp: a store others may write into (store.dir_error)
    w = subprocess.run(
        ["/usr/bin/python3", "-c", WRITE, str(store), *NAMES.values()],
        input=nested_slices(),
        capture_output=True,
        timeout=120,
        preexec_fn=A.as_nobody,
    )
    assert w.returncode == 0, w.stderr
    ui = Ui(store)
    try:
        base = rss_mib(ui.proc.pid)
        time.sleep(1.1)  # the listing
        # nobody grows a listed file past the limit after the listing
        with open(store / NAMES["grows"], "ab") as f:
            f.truncate(80 << 20)
        for what, name in NAMES.items():
            t0 = time.monotonic()
            status, _, body = http_get(ui.port, f"/api/timeline?file={name}")
            assert status == 400 and body.count(b"\n") <= 1, (what, status, body[:300])
            assert time.monotonic() - t0 < 10, what
            # its views and stacks: the same line, the trace not parsed again
            for path in (f"/api/timeline/view?file={name}&t0=0&t1=1000", f"/api/timeline/stack?file={name}&stack=0"):
                t0 = time.monotonic()
                status, _, again = http_get(ui.port, path)
                assert status == 400 and again == body and time.monotonic() - t0 < 1, (what, path, again[:300])
        assert b"more than the page reads" in http_get(ui.port, f"/api/timeline?file={NAMES['sparse']}")[2]
        assert b"open slices" in http_get(ui.port, f"/api/timeline?file={NAMES['nest']}")[2]
        assert rss_mib(ui.proc.pid) - base < 150, (base, rss_mib(ui.proc.pid))
        assert http_get(ui.port, "/api/status")[0] == 200
    finally:
        ui.stop()
