"""In-kernel events from .nanotrace files, end to end on the mock: `gpu-agent record
--nanotrace` (version 1, by name, grid and order) through the real shim and eBPF,
then `gpu-agent timeline merge` of that capture's NDJSON events with a version 4
file placed by its clock; every event inside its kernel's slice, read back with
the perfetto package's protos and json."""

from __future__ import annotations

import json
import subprocess

from gpu_agent.timeline import nanotrace as nt
from support.env import MOCK_APP, agent_cmd, mock_env, need_ebpf
from support.nanotrace_files import v1_file, v4_kernel
from support.perfetto_read import hangs_under, read_perfetto

KERNEL = "k_cuLaunchKernel(float*, int)"  # the mock's cuLaunchKernel kernel, grid 4x1x1


def test_record_then_merge_put_in_kernel_events_inside_their_kernels(tmp_path, built):
    need_ebpf()
    for name in "ab":
        (tmp_path / f"{name}.nanotrace").write_bytes(v1_file(kernel="k_cuLaunchKernel", grid=(4, 1, 1)))
    trace, events = tmp_path / "t.perfetto-trace", tmp_path / "t.ndjson"
    b5 = f"{tmp_path / 'b.nanotrace'}@5"
    p = subprocess.run(
        agent_cmd(
            "record",
            "--trace",
            trace,
            "--events",
            events,
            "-o",
            tmp_path / "p.pb.gz",
            "--nanotrace",
            tmp_path / "a.nanotrace",
            "--nanotrace",
            b5,
            "--",
            MOCK_APP,
            "--bench",
            "20",
        ),
        env=mock_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("gpu-agent: nanotrace: ")]
    assert len(said) == 2 and "launch 1 of 20" in said[0] and "launch 5 of 20" in said[1], p.stderr[-2000:]
    _, tracks, slices, _, _ = read_perfetto(trace)
    kernels = sorted((s for s in slices if s["name"] == KERNEL), key=lambda s: s["ts"])
    assert len(kernels) == 20
    for launch in (1, 5):
        k = kernels[launch - 1]
        label = f"#{k['args']['correlation_id']}:"
        ours = [s for s in slices if hangs_under(tracks, s["track"], k["track"], label)]
        assert len(ours) == 8, (launch, len(ours))
        assert all(k["ts"] <= s["ts"] and s["ts"] + s["dur"] <= k["ts"] + k["dur"] for s in ours)

    # after the fact: a version 4 file of the 10th launch, on %globaltimer, placed by its clock
    lines = [json.loads(ln) for ln in events.read_text().splitlines()]
    realtime, raw = lines[0]["monotonic_raw_pair"]
    # the NDJSON carries them too: each file's events under its kernel's line
    kernel_lines = [x for x in lines if x["type"] == "kernel"]
    assert [
        kernel_lines[x["kernel"]]["correlation_id"] == x["correlation_id"] for x in lines if x["type"] == "inkernel"
    ] == [True, True]
    assert sum(x["type"] == "inkernel_event" for x in lines) == 16
    tenth = sorted((x for x in lines if x["type"] == "kernel" and x["name"] == KERNEL), key=lambda x: x["start_ns"])[9]
    start_raw = tenth["start_ns"] - realtime + raw + 300
    (tmp_path / "c.nanotrace").write_bytes(nt.encode_v4(v4_kernel("k_cuLaunchKernel", start_raw, 2_000)))
    out = tmp_path / "m.json"
    p = subprocess.run(
        agent_cmd("timeline", "merge", events, tmp_path / "c.nanotrace", "-o", out, "--trace-format", "chrome"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert f"correlation id {tenth['correlation_id']}), by its clock snapshots: its start " in p.stderr, p.stderr
    # its 2 us of stamps, 0.3 us after CUPTI's start, fit in the mock's kernel: they stay
    # where the file's clock and the capture's pair put them (its first event 0.5 us in)
    assert tenth["end_ns"] - tenth["start_ns"] >= 2_300 and "moved" not in p.stderr, p.stderr
    doc = json.loads(out.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in doc if e["ph"] == "M" and e["name"] == "process_name"}
    pid = next(p for p, n in procs.items() if f"#{tenth['correlation_id']} (" in n)
    ours = [e for e in doc if e["pid"] == pid and e["ph"] == "X"]
    k = next(
        e for e in doc if e["ph"] == "X" and e["name"] == KERNEL and e["ts"] <= ours[0]["ts"] <= e["ts"] + e["dur"]
    )
    assert len(ours) == 8 and all(k["ts"] <= e["ts"] and e["ts"] + e["dur"] <= k["ts"] + k["dur"] for e in ours)
    assert abs(min(e["ts"] for e in ours) - (k["ts"] + 0.8)) <= 0.002, (k, ours[:2])

    # a file that matches nothing is said, and a merge that placed nothing fails
    (tmp_path / "d.nanotrace").write_bytes(v1_file(kernel="no_such_kernel"))
    p = subprocess.run(
        agent_cmd("timeline", "merge", events, tmp_path / "d.nanotrace", "-o", out),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1 and "kernel no_such_kernel (grid 2x1x1) matches no kernel" in p.stderr, p.stderr
