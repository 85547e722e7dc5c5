"""Placing .nanotrace files under a timeline's kernels (gpu_agent.timeline.inkernel),
the NDJSON events read back for `timeline merge`, and the merged trace written as
Perfetto (read back with the perfetto package's protos) and Chrome JSON."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pathlib import Path

from gpu_agent.timeline import nanotrace as nt
from gpu_agent.timeline import write_chrome, write_events, write_nanotrace, write_perfetto
from gpu_agent.timeline.collect import clock_pair
from gpu_agent.timeline.events_ndjson import EventsError, read_events
from gpu_agent.timeline.inkernel import BY_CLOCK, BY_ORDER, Spec, base_name, parse_spec, place_all
from gpu_agent.probes.devices import GpuDevice
from gpu_agent.timeline.model import Frame, KernelEvent, Timeline
from support.nanotrace_files import v1_file, v4_kernel, v4_launches
from support.perfetto_read import hangs_under, read_perfetto

T0 = 1_760_000_000_000_000_000
RAW0 = 9_000_000_000  # CLOCK_MONOTONIC_RAW when CLOCK_REALTIME read T0
GEMM = "void gemm_kernel<128>(float*, int)"
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "events.schema.json").read_text())


def timeline(n=3, grid=(2, 1, 1)) -> Timeline:
    """n launches of gemm_kernel 100 us apart, each 5 us long, one relu between."""
    tl = Timeline(host="h", started_ns=T0, ended_ns=T0 + 10**9, monotonic_raw_pair=(T0, RAW0))
    tl.processes = {7: "train"}
    tl.devices = {(7, 0): GpuDevice(0, "GPU-x", "H100")}
    tl.stacks = {1: [Frame(GEMM, "kernel"), Frame("step", "python", "/a.py", 3)]}
    for i in range(n):
        t = T0 + 1_000_000 + i * 100_000
        tl.kernels.append(
            KernelEvent(
                7,
                t,
                t + 5_000,
                GEMM,
                "_Z11gemm_kernelILi128EEvPfi",
                0,
                13,
                1,
                10 + i,
                grid=grid,
                block=(128, 1, 1),
                stack_id=1,
            )
        )
        tl.kernels.append(KernelEvent(7, t + 6_000, t + 7_000, "relu(float*)", "_Z4reluPf", 0, 13, 1, 50 + i))
    return tl


def files(tmp_path, **named: bytes) -> dict:
    out = {}
    for name, data in named.items():
        (tmp_path / name).write_bytes(data)
        out[name] = str(tmp_path / name)
    return out


def inside(tl: Timeline) -> bool:
    return all(
        tl.kernels[ik.kernel].start_ns <= e.start_ns <= e.end_ns <= tl.kernels[ik.kernel].end_ns
        for ik in tl.inkernel
        for e in ik.events
    )


def test_names_and_specs():
    assert base_name(GEMM) == "gemm_kernel" and base_name("ns::k<a<b>>(int)") == "k"
    assert base_name("gemm_kernel") == "gemm_kernel" and base_name("") == ""
    assert parse_spec("a.nanotrace@3") == Spec("a.nanotrace", 3)
    assert parse_spec("a@b.nanotrace") == Spec("a@b.nanotrace") and parse_spec("x@0") == Spec("x@0")


def test_version_1_files_take_their_kernels_launches_in_order(tmp_path):
    tl = timeline()
    f = files(
        tmp_path,
        a=v1_file(kernel="gemm_kernel"),
        b=v1_file(kernel="gemm_kernel"),
        c=v1_file(kernel="gemm_kernel"),
        d=v1_file(kernel="gemm_kernel"),
    )
    lines = place_all(tl, [Spec(f["a"]), Spec(f["b"]), Spec(f["c"], 1), Spec(f["d"])])
    assert [ik.kernel for ik in tl.inkernel] == [0, 2, 0, 4], lines
    assert all(ik.placed_by == BY_ORDER and len(ik.events) == 8 and not ik.clamped for ik in tl.inkernel)
    assert "launch 1 of 3 (FILE@N picks another)" in lines[0] and "by name, grid and order" in lines[0]
    assert "launch 3 of 3" in lines[3]
    # offsets from the kernel's start, CTAs holding their warps
    ik = tl.inkernel[1]
    k = tl.kernels[ik.kernel]
    assert sorted(e.start_ns - k.start_ns for e in ik.events)[:4] == [0, 0, 32, 32]
    names = {t.id: t for t in ik.tracks}
    assert [t.name for t in ik.tracks if t.parent == 0] == ["CTA 0", "CTA 1"]
    assert all(names[e.track].parent != 0 for e in ik.events)
    assert inside(tl)


def test_what_matches_nothing_is_said_and_merges_nothing(tmp_path):
    tl = timeline(n=1)
    f = files(
        tmp_path,
        a=v1_file(kernel="other"),
        b=v1_file(kernel="gemm_kernel", grid=(3, 1, 1)),
        c=v1_file(kernel="gemm_kernel"),
        d=v1_file(kernel="gemm_kernel"),
        e=b"junk",
        g=v1_file(kernel="gemm_kernel"),
    )
    lines = place_all(
        tl,
        [
            Spec(f["a"]),
            Spec(f["b"]),
            Spec(f["c"]),
            Spec(f["d"]),
            Spec(f["e"]),
            Spec(f["g"], 2),
            Spec(str(tmp_path / "missing")),
        ],
    )
    assert "kernel other (grid 2x1x1) matches no kernel of the timeline; not merged" in lines[0]
    assert "(grid 3x1x1) matches no kernel" in lines[1]
    assert "launch 1," in lines[2] and "FILE@N" not in lines[2]
    assert "ran 1 times, each has a file already; not merged" in lines[3]
    assert "not a .nanotrace file" in lines[4] and "ran 1 times, not 2" in lines[5]
    assert "missing" in lines[6] and len(lines) == 7 and all("\n" not in ln for ln in lines)
    assert len(tl.inkernel) == 1


def test_events_past_the_kernel_are_cut_to_its_slice_and_counted(tmp_path):
    tl = timeline(n=1)
    f = files(tmp_path, a=v1_file(kernel="gemm_kernel", events_per_lane=4, step=2_000))
    lines = place_all(tl, [Spec(f["a"])])
    ik = tl.inkernel[0]
    assert ik.clamped == 4 and "4 cut to the kernel's slice" in lines[0] and inside(tl)


def test_version_4_goes_under_the_launch_its_clock_says_and_where_it_says(tmp_path):
    """Issue 46: a launch its snapshots already put inside its kernel stays where they
    put it. The median of the middles moved it 0.2 us off its clock (on an H200, a
    single launch's events sat 1.8-3.1 us off the file's own snapshots)."""
    tl = timeline()
    # the second launch, 1.2 us after CUPTI's start by %globaltimer
    start_raw = tl.kernels[2].start_ns - T0 + RAW0 + 1_200
    f = files(
        tmp_path,
        a=nt.encode_v4(v4_kernel("gemm_kernel", start_raw, 3_000)),
        far=nt.encode_v4(v4_kernel("gemm_kernel", start_raw + 50_000_000, 3_000)),
    )
    lines = place_all(tl, [Spec(f["a"]), Spec(f["far"])])
    assert [(ik.kernel, ik.placed_by) for ik in tl.inkernel] == [(2, BY_CLOCK)], lines
    # its 3 us, 1.2 us after CUPTI's start, fit in CUPTI's 5 us: not moved
    assert "correlation id 11" in lines[0] and lines[0].endswith("its start 1.2 us after CUPTI's"), lines
    ik = tl.inkernel[0]
    assert len(ik.tracks) == 6 and len(ik.events) == 8 and not ik.clamped and inside(tl)
    k = tl.kernels[2]
    assert min(e.start_ns for e in ik.events) == k.start_ns + 1_200 + 750
    assert "matches no kernel of the timeline (the nearest started 49.901 ms away); not merged" in lines[1]


def test_the_capture_reads_its_clock_pair_in_one_instant():
    """Issue 46: the capture's (CLOCK_REALTIME, CLOCK_MONOTONIC_RAW) pair was two reads
    one after the other, 2.4-3.3 us apart in the agent on an H200, and every merged
    event sat that much early. It is a realtime read between two raw reads now, the
    narrowest of many. Here each round's reads come 0.1 us and then 5 us apart (the
    interpreter taken between them: read one after the other, 5 us off), but for one
    round of 50 ns each."""
    now, offset = [0], 1_800_000_000_000_000_000
    gaps = iter([10_000, 100, 5_000] * 20 + [10_000, 50, 50] + [10_000, 100, 5_000] * 100)

    def read(plus: int = 0):
        now[0] += next(gaps)
        return now[0] + plus

    realtime, raw = clock_pair(lambda: read(offset), read)
    assert realtime - raw == offset


def v4_kernels(tl: Timeline, offsets: list[int]) -> bytes:
    """One version 4 file: a gemm_kernel for each of the timeline's first
    len(offsets) launches of it, starting that many ns after CUPTI's start."""
    t = None
    for i, off in enumerate(offsets):
        one = v4_kernel("gemm_kernel", tl.kernels[2 * i].start_ns - T0 + RAW0 + off, 3_000)
        if t is None:
            t = one
            continue
        base = max(t.tracks)
        t.tracks.update(
            {
                tr.id + base: dataclasses.replace(tr, id=tr.id + base, parent=tr.parent and tr.parent + base)
                for tr in one.tracks.values()
            }
        )
        t.events += [dataclasses.replace(e, track=e.track + base) for e in one.events]
    return nt.encode_v4(t)


def test_a_file_a_few_microseconds_off_cuptis_clock_moves_by_the_least_that_fits(tmp_path):
    """Snapshots and the capture's clock 2.6 us apart (as an H100 capture read them
    before the pair was read in one instant): each event would start before its kernel
    and be cut. The file's times move by the least that puts every launch in its
    kernel (3 us of stamps in 5 us of CUPTI's: from 2.603 us on, each off it by -2..+2
    ns); what is left of each kernel's own offset stays, and the line says both."""
    tl = timeline(n=5)
    offsets = [-2_600 - 3 + i for i in range(5)]  # median -2.601 us; each off it by -2..+2 ns
    lines = place_all(tl, [Spec(files(tmp_path, a=v4_kernels(tl, offsets))["a"])])
    assert [ik.kernel for ik in tl.inkernel] == [0, 2, 4, 6, 8] and inside(tl), lines
    assert [min(e.start_ns for e in ik.events) - tl.kernels[ik.kernel].start_ns for ik in tl.inkernel] == [
        750,
        750 + 1,
        750 + 2,
        750 + 3,
        750 + 4,
    ]
    assert sum(ik.clamped for ik in tl.inkernel) == 0
    assert (
        "5 of 5 kernels placed by their clock snapshots (40 events); the file's times moved 2.6 us after its "
        "clock (the least that puts its launches in their kernels); the first: 8 events"
    ) in lines[0], lines


def test_each_launch_of_a_kernel_goes_under_its_own_launch_by_its_parent_slice(tmp_path):
    """Issue 46: upstream puts every launch of a kernel under one kernel track and ties
    each event to its launch's HES slice by Event.parent. Read as one kernel, its
    events spanned all three launches and went under the first, 16 of 24 cut to its
    slice. Each launch goes under its own now, whole, at its own offset."""
    tl = timeline(n=3)
    offsets = [1_000, 1_100, 900]  # each HES slice this far after CUPTI's start, 3 us long
    starts = [tl.kernels[2 * i].start_ns - T0 + RAW0 + off for i, off in enumerate(offsets)]
    lines = place_all(tl, [Spec(files(tmp_path, a=nt.encode_v4(v4_launches("gemm_kernel", starts, 3_000)))["a"])])
    assert [ik.kernel for ik in tl.inkernel] == [0, 2, 4], lines
    assert [len(ik.events) for ik in tl.inkernel] == [8, 8, 8] and [len(ik.tracks) for ik in tl.inkernel] == [6] * 3
    assert sum(ik.clamped for ik in tl.inkernel) == 0 and inside(tl), lines
    # the HES slices (3 us, 0.9-1.1 us after CUPTI's start) fit in CUPTI's 5 us: each
    # launch where the file's clock puts it
    assert [min(e.start_ns for e in ik.events) - tl.kernels[ik.kernel].start_ns for ik in tl.inkernel] == [
        1_000 + 750,
        1_100 + 750,
        900 + 750,
    ]
    assert "moved" not in lines[0], lines
    for corr, off in zip((10, 11, 12), ("1.0", "1.1", "0.9")):
        assert (
            f"8 events under {GEMM} (correlation id {corr}), by its clock snapshots: its start {off} us after"
            in (lines[0])
        ), lines


def test_parent_slices_on_a_clock_no_snapshot_maps_leave_the_events_one_launch(tmp_path):
    """The launches' slices on a stream whose clock no snapshot leads from: they cannot
    be placed, so the kernel's events are one launch again (cut to the launch they are
    nearest), not a file refused."""
    tl = timeline(n=3)
    starts = [tl.kernels[2 * i].start_ns - T0 + RAW0 + 1_000 for i in range(3)]
    f = v4_launches("gemm_kernel", starts, 3_000)
    f.clocks[5] = (2, 0, 0, 1_000_000_000)  # a CUPTI clock, no snapshot
    f.tracks[1] = dataclasses.replace(f.tracks[1], clock=5)
    lines = place_all(tl, [Spec(files(tmp_path, a=nt.encode_v4(f))["a"])])
    assert [ik.kernel for ik in tl.inkernel] == [0] and tl.inkernel[0].clamped == 16, lines
    assert "24 events under" in lines[0] and "not merged" not in lines[0], lines


def test_a_kernel_past_the_files_own_offset_is_still_cut_and_counted(tmp_path):
    """One kernel of five 2.5 us before the rest, which fit: no move puts all five in
    their kernels, and the four are not moved for it; the stray's events that start
    before CUPTI's start of it are cut to its slice, counted."""
    tl = timeline(n=5)
    lines = place_all(tl, [Spec(files(tmp_path, a=v4_kernels(tl, [0, 0, -2_500, 0, 0]))["a"])])
    assert [ik.clamped for ik in tl.inkernel] == [0, 0, 8, 0, 0] and inside(tl), lines
    assert "(40 events, 8 cut to their kernel's slice); the first" in lines[0] and "moved" not in lines[0], lines


def test_version_4_without_a_clock_onto_the_timeline_goes_by_order(tmp_path):
    tl = timeline()
    tl.monotonic_raw_pair = None
    f = files(tmp_path, a=nt.encode_v4(v4_kernel("gemm_kernel", 123_000_000, 3_000)))
    lines = place_all(tl, [Spec(f["a"], 3)])
    assert [(ik.kernel, ik.placed_by) for ik in tl.inkernel] == [(4, BY_ORDER)], lines
    k = tl.kernels[4]
    # its 3 us centred in CUPTI's 5 us (where it sat is not in the file): 1 us in
    assert min(e.start_ns for e in tl.inkernel[0].events) == k.start_ns + 1_000 + 750 and inside(tl)


def test_a_standalone_file_ending_at_zero_goes_by_order_without_file_at_n(tmp_path):
    """Issue 46: upstream's trace_writer::write pins its kernel's end at 0 on
    CLOCK_MONOTONIC_RAW. Read as an absolute time it "matched no kernel of the timeline
    (the nearest started 1000000.013 ms away)" unless given FILE@N; it goes by name
    and order now, as a file without absolute time does: the first launch, then the
    next for a second such file."""
    tl = timeline()
    standalone = v4_kernel("gemm_kernel", 5_000_000_000, 3_000)
    end = max(e.start + e.duration for e in standalone.events)  # on its %globaltimer
    standalone.snapshots = [(3, 1, end, 0, 0)]  # one snapshot: the kernel's end is 0
    f = files(tmp_path, a=nt.encode_v4(standalone), b=nt.encode_v4(standalone))
    lines = place_all(tl, [Spec(f["a"]), Spec(f["b"])])
    assert [(ik.kernel, ik.placed_by) for ik in tl.inkernel] == [(0, BY_ORDER), (2, BY_ORDER)], lines
    assert all("(the file has no absolute time)" in ln for ln in lines) and inside(tl), lines
    k = tl.kernels[0]
    # centred: its first event 1 us + 750 ns in
    assert min(e.start_ns for e in tl.inkernel[0].events) == k.start_ns + 1_000 + 750


def merged(tmp_path) -> Timeline:
    tl = timeline()
    f = files(
        tmp_path,
        a=v1_file(kernel="gemm_kernel"),
        b=nt.encode_v4(v4_kernel("gemm_kernel", tl.kernels[4].start_ns - T0 + RAW0, 3_000)),
    )
    place_all(tl, [Spec(f["a"]), Spec(f["b"])])
    assert len(tl.inkernel) == 2
    return tl


def test_perfetto_puts_the_tracks_under_the_kernels_stream(tmp_path):
    tl = merged(tmp_path)
    write_perfetto(tl, tmp_path / "t.pftrace")
    _, tracks, slices, _, _ = read_perfetto(tmp_path / "t.pftrace")
    kernels = {s["args"]["correlation_id"]: s for s in slices if s["name"] == GEMM}
    stream = kernels[10]["track"]
    for ik in tl.inkernel:
        k = kernels[tl.kernels[ik.kernel].correlation_id]
        assert k["track"] == stream
        ours = [
            s
            for s in slices
            if s["name"] in ("mma", "load", "tma load")
            and hangs_under(tracks, s["track"], stream, f"#{tl.kernels[ik.kernel].correlation_id}:")
        ]
        assert len(ours) == len(ik.events) == 8
        assert all(k["ts"] <= s["ts"] and s["ts"] + s["dur"] <= k["ts"] + k["dur"] for s in ours)
    by_clock = [s for s in slices if s["name"] == "mma" and "scale" in s["args"]]
    assert by_clock and all(s["args"]["scale"] == 0.5 for s in by_clock)


def test_chrome_gives_each_kernel_instance_a_process(tmp_path):
    tl = merged(tmp_path)
    write_chrome(tl, tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    kernels = [e for e in events if e["ph"] == "X" and e["name"] == GEMM]
    for ik in tl.inkernel:
        k = tl.kernels[ik.kernel]
        pid = next(p for p, n in procs.items() if f"#{k.correlation_id} (" in n)
        ours = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
        assert len(ours) == 8 and {e["cat"] for e in ours} == {"nanotrace"}
        span = [e for e in kernels if e["ts"] <= ours[0]["ts"] <= e["ts"] + e["dur"]]
        assert len(span) == 1 and all(
            span[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= span[0]["ts"] + span[0]["dur"] for e in ours
        )
    threads = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert "CTA 1 / warp 1" in threads


def test_events_read_back_for_a_merge(tmp_path):
    tl = timeline()
    tl.threads = {(7, 8): "main"}
    for mode in ("dedup", "full", "nostack"):
        write_events(tl, tmp_path / f"{mode}.ndjson", mode)
        back = read_events(tmp_path / f"{mode}.ndjson")
        assert back.kernels == ([k for k in tl.kernels] if mode == "dedup" else back.kernels)
        assert (back.monotonic_raw_pair, back.devices, back.threads) == (tl.monotonic_raw_pair, tl.devices, tl.threads)
        if mode != "nostack":
            assert [back.stacks[k.stack_id] for k in back.kernels if k.stack_id] == [
                tl.stacks[k.stack_id] for k in tl.kernels if k.stack_id
            ]


def test_in_kernel_events_go_through_ndjson_and_back(tmp_path):
    """record --events and timeline merge --events carry the merged in-kernel events:
    every line valid against docs/events.schema.json, read back the same."""
    import jsonschema

    tl = merged(tmp_path)
    tl.inkernel[1].events[0].args.append(("label", "tile 3"))
    for mode in ("dedup", "full", "nostack"):
        write_events(tl, tmp_path / f"{mode}.ndjson", mode)
        lines = [json.loads(x) for x in (tmp_path / f"{mode}.ndjson").read_text().splitlines()]
        validator = jsonschema.Draft202012Validator(SCHEMA)
        for line in lines:
            validator.validate(line)
        assert [x["type"] for x in lines].count("inkernel") == 2
        back = read_events(tmp_path / f"{mode}.ndjson")
        assert back.inkernel == tl.inkernel
    back.inkernel = []
    assert place_all(back, [Spec(tmp_path / "a")]) and len(back.inkernel) == 1


def bad_inkernel(tmp_path, edit) -> str:
    """A good events file with one of its in-kernel lines edited."""
    tl = merged(tmp_path)
    write_events(tl, tmp_path / "e.ndjson")
    lines = [json.loads(x) for x in (tmp_path / "e.ndjson").read_text().splitlines()]
    edit(lines)
    (tmp_path / "e.ndjson").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(EventsError) as e:
        read_events(tmp_path / "e.ndjson")
    return str(e.value)


def _first(lines, kind):
    return next(x for x in lines if x["type"] == kind)


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda ls: _first(ls, "inkernel").update(kernel=99), "names kernel 99 of 6"),
        (lambda ls: _first(ls, "inkernel").update(id=5), "names kernel"),
        (lambda ls: _first(ls, "inkernel_track").update(of=1), "not of the inkernel line before it"),
        (lambda ls: _first(ls, "inkernel_track").update(parent=42), "before its parent"),
        (lambda ls: _first(ls, "inkernel_event").update(track=77), "no such track"),
        (lambda ls: _first(ls, "inkernel_event").update(end_ns=0), "ends before it starts"),
        (lambda ls: _first(ls, "inkernel_event").update(args=[["a", {"b": 1}]]), "not a string or a number"),
        (lambda ls: _first(ls, "inkernel_event").update(args=[["a"]]), "ValueError"),
        (lambda ls: ls.insert(1, {"type": "inkernel_event", "of": 0}), "not of the inkernel line before it"),
    ],
)
def test_a_bad_in_kernel_line_is_one_line(tmp_path, edit, why):
    said = bad_inkernel(tmp_path, edit)
    assert why in said and "e.ndjson:" in said and "\n" not in said, said


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ('{"type":"kernel"}\n', "no header line first"),
        ("nope\n", "not a gpu-agent event line"),
        ('{"type":"header"}\n', "KeyError"),
        ("x" * (1 << 21), "longer than"),
    ],
)
def test_a_bad_events_file_is_one_line(tmp_path, text, why):
    (tmp_path / "e.ndjson").write_text(text)
    with pytest.raises(EventsError) as e:
        read_events(tmp_path / "e.ndjson")
    assert why in str(e.value) and "\n" not in str(e.value)


def test_the_timeline_as_a_version_4_file_reads_back(tmp_path):
    """--trace-format nanotrace: our reader (whose layout checks test_nanotrace
    makes against docs/nanotrace.md) finds every kernel on its stream at its time on
    CLOCK_MONOTONIC_RAW, and the merged in-kernel events under their kernel."""
    tl = merged(tmp_path)
    write_nanotrace(tl, tmp_path / "t.nanotrace")
    back = nt.read(tmp_path / "t.nanotrace")
    assert back.version == 4 and back.absolute is False and back.clocks[back.reference_clock][0] == 0
    kinds = {tr.id: tr.kind for tr in back.tracks.values()}
    on_streams = [e for e in back.events if kinds[e.track] == 3]
    assert [(e.name, e.start + T0 - RAW0, e.duration, e.correlation) for e in on_streams] == [
        (k.name, k.start_ns, k.end_ns - k.start_ns, k.correlation_id) for k in tl.kernels
    ]
    assert dict(on_streams[0].args)["stack"] == "void gemm_kernel<128>(float*, int)\nstep (/a.py:3)"
    gpu = back.tracks[back.tracks[on_streams[0].track].parent]
    assert (gpu.kind, back.tracks[gpu.parent].kind) == (2, 0)
    for ik in tl.inkernel:
        k = tl.kernels[ik.kernel]
        root = next(tr for tr in back.tracks.values() if tr.kind == 4 and tr.name.endswith(f"#{k.correlation_id}"))
        assert kinds[root.parent] == 3
        under = {tr.id for tr in back.tracks.values() if tr.parent == root.id}
        under |= {tr.id for tr in back.tracks.values() if tr.parent in under}
        ours = [e for e in back.events if e.track in under]
        assert len(ours) == len(ik.events) == 8
        assert all(k.start_ns <= e.start + T0 - RAW0 <= e.start + e.duration + T0 - RAW0 <= k.end_ns for e in ours)


def test_an_events_file_past_its_byte_bound_is_one_error(tmp_path, monkeypatch):
    """Issue 44: lines and their count were bounded, not their product (20 M lines of
    1 MiB). The whole file is bounded too (MAX_BYTES, 4 GiB; 600 bytes here)."""
    from gpu_agent.timeline import events_ndjson

    tl = Timeline(host="h", started_ns=1, ended_ns=10**9)
    for i in range(20):
        tl.kernels.append(KernelEvent(7, 1000 * i, 1000 * i + 500, "k", "k", 0, 1, 1, i + 1))
    path = tmp_path / "e.ndjson"
    write_events(tl, path)
    assert len(read_events(path).kernels) == 20
    monkeypatch.setattr(events_ndjson, "MAX_BYTES", 600)
    assert path.stat().st_size > 600
    with pytest.raises(EventsError, match="more than 600 bytes"):
        read_events(path)
