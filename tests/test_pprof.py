"""ProfileBuilder output, checked with Go's real pprof (build/tools/pprof)."""

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_agent.profile.pprof import FrameSpec, MappingSpec, ProfileBuilder
from gpu_agent.proto import profile_pb2
from gpu_agent.symbols.native import Frame

REPO = Path(__file__).resolve().parent.parent
PPROF = os.environ.get("GPU_AGENT_PPROF") or str(REPO / "build" / "tools" / "pprof")
if not os.access(PPROF, os.X_OK):
    PPROF = shutil.which("pprof") or PPROF

# Missing Go pprof is a broken test environment, not a reason to skip (make test builds it).
needs_pprof = pytest.mark.usefixtures("_require_pprof")


@pytest.fixture
def _require_pprof():
    if not os.access(PPROF, os.X_OK):
        pytest.fail(
            "Go pprof not built (GO111MODULE=off GOPATH=/usr/share/gocode "
            "go build -o build/tools/pprof github.com/google/pprof)"
        )


KERNEL_CPP = "_ZN5flash13attn_fwd_kernILi128EEEvPKfPf"  # void flash::attn_fwd_kern<128>(float const*, float*)
KERNEL_CPP_DEMANGLED = "void flash::attn_fwd_kern<128>(float const*, float*)"
KERNEL_C = "vectorAdd"


def long_kernel():
    """A valid ~6000+ char mangled name: ns::k<T0_xxx<0>, ..., T23_xxx<23>>(float*)."""
    ident = "x" * 240
    args_m = []
    args_d = []
    for i in range(24):
        name = f"T{i}_{ident}"
        args_m.append(f"N12cutlass_like{len(name)}{name}ILi{i}EEE")
        args_d.append(f"cutlass_like::{name}<{i}>")
    mangled = "_ZN12cutlass_like4kernIJ" + "".join(args_m) + "EEEvPf"
    demangled = "void cutlass_like::kern<" + ", ".join(args_d) + " >(float*)"
    return mangled, demangled


def run_pprof(*args, cwd=None):
    env = dict(os.environ, PPROF_TMPDIR=str(cwd or "/tmp"), HOME=str(cwd or "/tmp"))
    r = subprocess.run([PPROF, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def native(fn, path, rel, bid=None, sysname=""):
    return FrameSpec.native(Frame(fn, path, rel, bid, 0, sysname))


def build_profile():
    b = ProfileBuilder(period_ns=64, duration_ns=10_000_000_000, time_nanos=1_700_000_000_000_000_000)
    stack = [
        native("ns::Model::forward(int)", "/opt/app/libmodel.so", 0x1234, "deadbeef01", "_ZN2ns5Model7forwardEi"),
        native("main", "/opt/app/bin", 0x401136, "cafe02"),
    ]
    lab0 = {"device": "0", "stream": "7", "process": "train"}
    b.add([FrameSpec.kernel(KERNEL_CPP)] + stack, 1_000_000, 10, lab0)
    b.add([FrameSpec.kernel(KERNEL_CPP)] + stack, 500_000, 5, dict(lab0))  # merged with the above
    b.add([FrameSpec.kernel(KERNEL_C)] + stack, 250_000, 2, lab0)
    b.add([FrameSpec.kernel(KERNEL_C), FrameSpec.marker("[unsampled]")], 40_000, 4, {"device": "1"})
    b.add(
        [
            FrameSpec.kernel(KERNEL_C),
            FrameSpec.python("train_step", "/opt/app/train.py", 42),
            FrameSpec.python("<module>", "/opt/app/train.py", 7),
        ]
        + stack[1:],
        7_000,
        1,
        {"device": "1", "stream": "3"},
    )
    mangled, _ = long_kernel()
    b.add([FrameSpec.kernel(mangled), FrameSpec.marker("[unsampled]")], 3, 1, {"device": "0"})
    return b


TOTAL_NS = 1_500_000 + 250_000 + 40_000 + 7_000 + 3
TOTAL_LAUNCHES = 15 + 2 + 4 + 1 + 1


def test_long_name_fixture_is_valid():
    from gpu_agent.symbols.demangle import demangle_kernel

    mangled, demangled = long_kernel()
    assert len(mangled) > 6000
    assert demangle_kernel(mangled) == demangled


def test_proto_structure(tmp_path):
    b = build_profile()
    assert len(b) == 5  # the two identical samples merged
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(b.to_bytes()))
    st = list(p.string_table)
    assert st[0] == "" and len(set(st)) == len(st)
    assert [(st[t.type], st[t.unit]) for t in p.sample_type] == [
        ("gpu_time", "nanoseconds"),
        ("kernel_launches", "count"),
    ]
    assert st[p.default_sample_type] == "gpu_time"
    assert (st[p.period_type.type], st[p.period_type.unit], p.period) == ("gpu_time", "nanoseconds", 64)
    for coll in (p.mapping, p.location, p.function):
        ids = [x.id for x in coll]
        assert ids == list(range(1, len(ids) + 1))
    maps = {st[m.filename]: m for m in p.mapping}
    assert set(maps) == {"[cuda]", "/opt/app/libmodel.so", "/opt/app/bin", "[gpu-agent]", "[python]"}
    assert st[maps["/opt/app/libmodel.so"].build_id] == "deadbeef01"
    assert all(m.has_functions for m in p.mapping)
    funcs = {st[f.name]: f for f in p.function}
    k = funcs[KERNEL_CPP_DEMANGLED]
    assert st[k.system_name] == KERNEL_CPP and st[k.filename] == "CUDA_KERNEL"
    # deduplicated: one function / location per distinct frame
    assert len(p.function) == len(funcs) == 8
    assert len(p.location) == 8
    locs = {l.id: l for l in p.location}
    native_loc = [l for l in p.location if l.address == 0x1234]
    assert len(native_loc) == 1 and locs[native_loc[0].id].mapping_id == maps["/opt/app/libmodel.so"].id
    s0 = p.sample[0]
    assert list(s0.value) == [1_500_000, 15]
    assert [st[funcs_id] for funcs_id in [p.function[locs[s0.location_id[0]].line[0].function_id - 1].name]] == [
        KERNEL_CPP_DEMANGLED
    ]  # leaf first
    assert {st[l.key]: st[l.str] for l in s0.label} == {"device": "0", "stream": "7", "process": "train"}
    assert sum(s.value[0] for s in p.sample) == TOTAL_NS
    assert sum(s.value[1] for s in p.sample) == TOTAL_LAUNCHES
    assert p.time_nanos == 1_700_000_000_000_000_000 and p.duration_nanos == 10_000_000_000
    assert b.to_bytes() == b.to_bytes()  # deterministic


def test_write_is_atomic(tmp_path):
    b = build_profile()
    out = tmp_path / "p.pb.gz"
    out.write_bytes(b"old")
    b.write(out)
    assert out.read_bytes() == b.to_bytes()
    assert os.listdir(tmp_path) == ["p.pb.gz"]
    with pytest.raises(OSError):
        b.write(tmp_path / "missing-dir" / "p.pb.gz")
    assert os.listdir(tmp_path) == ["p.pb.gz"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("pprof")
    path = d / "gpu.pb.gz"
    build_profile().write(path)
    return d, str(path)


@needs_pprof
def test_pprof_raw(written):
    d, path = written
    out, _ = run_pprof("-raw", path, cwd=d)
    assert "PeriodType: gpu_time nanoseconds" in out
    assert "Period: 64" in out
    assert "gpu_time/nanoseconds[dflt] kernel_launches/count" in out
    # Sample values: "<ns> <launches>: <location ids>"
    vals = [tuple(map(int, m)) for m in re.findall(r"^\s+(\d+)\s+(\d+): [\d ]+$", out, re.M)]
    assert sorted(vals) == sorted([(1_500_000, 15), (250_000, 2), (40_000, 4), (7_000, 1), (3, 1)])
    assert sum(v[0] for v in vals) == TOTAL_NS
    assert f" {KERNEL_CPP_DEMANGLED} CUDA_KERNEL:0 s=0({KERNEL_CPP})" in out
    assert f" {KERNEL_C} CUDA_KERNEL:0 s=0" in out
    assert "ns::Model::forward(int) /opt/app/libmodel.so:0 s=0(_ZN2ns5Model7forwardEi)" in out
    assert "train_step /opt/app/train.py:42" in out
    assert "<module> /opt/app/train.py:7" in out
    assert "[unsampled]" in out
    assert re.search(r"0x1234 M=\d+ ns::Model::forward\(int\)", out)
    assert re.search(r"/opt/app/libmodel.so deadbeef01 \[FN\]", out)
    assert "[cuda]" in out
    # The long kernel name comes out whole.
    mangled, demangled = long_kernel()
    assert f" {demangled} CUDA_KERNEL:0 s=0({mangled})" in out
    assert "device:[0] stream:[7]" in out or "process:[train]" in out


@needs_pprof
def test_pprof_top(written):
    d, path = written
    out, _ = run_pprof("-top", "-unit=ns", "-nodecount=100", "-nodefraction=0", path, cwd=d)
    assert f"Total samples = {TOTAL_NS}ns" in out and f"of {TOTAL_NS}ns total" in out
    assert "File: [gpu-agent]" in out
    flat = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+)(?:ns)?\s+[\d.]+%\s+[\d.]+%\s+(\d+)(?:ns)?\s+[\d.]+%\s+(.*)$", line)
        if m:
            flat[m.group(3)] = (int(m.group(1)), int(m.group(2)))
    assert flat[KERNEL_CPP_DEMANGLED] == (1_500_000, 1_500_000)
    assert flat[KERNEL_C] == (297_000, 297_000)
    assert flat["ns::Model::forward(int)"] == (0, 1_750_000)
    assert flat["main"] == (0, 1_757_000)
    assert flat["[unsampled]"][1] == 40_003
    assert flat["train_step"] == (0, 7_000)
    assert flat["<module>"] == (0, 7_000)

    out, _ = run_pprof("-top", "-sample_index=kernel_launches", "-nodecount=100", path, cwd=d)
    assert f"of {TOTAL_LAUNCHES} total" in out
    assert re.search(r"^\s*15\s+[\d.]+%.*" + re.escape(KERNEL_CPP_DEMANGLED), out, re.M)


@needs_pprof
def test_pprof_traces_and_tags(written):
    d, path = written
    out, _ = run_pprof("-traces", "-unit=ns", path, cwd=d)
    blocks = [b for b in out.split("-----------+") if "ns" in b]
    by_leaf = {}
    for blk in blocks:
        lines = [l.rstrip() for l in blk.splitlines() if l.strip() and not l.strip().startswith("----")]
        labels = {}
        frames = []
        value = None
        for l in lines:
            m = re.match(r"^\s*(\w+):\s+(\S+)$", l)
            if m and value is None:
                labels[m.group(1)] = m.group(2)
                continue
            m = re.match(r"^\s*(\d+)ns\s+(.*)$", l)
            if m:
                value = int(m.group(1))
                frames.append(m.group(2))
            elif value is not None:
                frames.append(l.strip())
        if value is not None:
            by_leaf.setdefault(frames[0], []).append((value, frames, labels))
    [(v, frames, labels)] = by_leaf[KERNEL_CPP_DEMANGLED]
    assert v == 1_500_000
    assert frames == [KERNEL_CPP_DEMANGLED, "ns::Model::forward(int)", "main"]
    assert labels == {"device": "0", "stream": "7", "process": "train"}
    c = sorted(by_leaf[KERNEL_C], key=lambda e: e[0])
    assert [e[0] for e in c] == [7_000, 40_000, 250_000]
    assert c[0][1] == [KERNEL_C, "train_step", "<module>", "main"]
    assert c[0][2] == {"device": "1", "stream": "3"}
    assert c[1][1] == [KERNEL_C, "[unsampled]"] and c[1][2] == {"device": "1"}

    out, _ = run_pprof("-tags", "-unit=ns", path, cwd=d)
    assert re.search(r"device: Total 1797003(\.0)?ns", out), out
    assert re.search(r"\(\s*[\d.]+%\): 0$", out, re.M) and re.search(r"\(\s*[\d.]+%\): 1$", out, re.M)
    assert re.search(r"stream: Total", out) and re.search(r"\): 7$", out, re.M) and re.search(r"\): 3$", out, re.M)
    assert re.search(r"process: Total .*\n.*\): train$", out, re.M)


@needs_pprof
def test_pprof_accepts_empty_profile(tmp_path):
    path = tmp_path / "empty.pb.gz"
    ProfileBuilder(1, 1, 1).write(path)
    out, _ = run_pprof("-raw", str(path), cwd=tmp_path)
    assert "gpu_time/nanoseconds[dflt]" in out


def test_pc_samples_type_only_when_a_sample_has_pc_samples(tmp_path):
    """The third sample type appears once a sample carries PC samples; every sample
    then has three values, and Go pprof reads them by that type."""
    k = FrameSpec.kernel("_Z1kv")
    plain = ProfileBuilder(1, 1, 1)
    plain.add([k], 100, 1)
    pp = plain.to_proto()
    assert [pp.string_table[s.type] for s in pp.sample_type] == ["gpu_time", "kernel_launches"]
    b = ProfileBuilder(1, 1, 1)
    b.add([k], 100, 1)
    b.add([FrameSpec.marker("[stall: wait]"), k], 0, 0, {"stall_reason": "wait"}, pc_samples=7)
    b.add([FrameSpec.marker("[stall: wait]"), k], 0, 0, {"stall_reason": "wait"}, pc_samples=5)
    p = b.to_proto()
    assert [p.string_table[s.type] for s in p.sample_type] == ["gpu_time", "kernel_launches", "pc_samples"]
    assert sorted(list(s.value) for s in p.sample) == [[0, 0, 12], [100, 1, 0]]
    path = tmp_path / "pc.pb.gz"
    b.write(path)
    out, _ = run_pprof("-top", "-sample_index=pc_samples", str(path), cwd=tmp_path)
    assert re.search(r"^\s*12\s+100%.*\[stall: wait\]", out, re.M), out


def test_mapping_spec_dedup():
    b = ProfileBuilder(1, 1, 1)
    m = MappingSpec("/lib/x.so", "b1")
    b.add([FrameSpec("f", "", "/lib/x.so", 0, 0x10, m)], 1, 1, {})
    b.add([FrameSpec("f", "", "/lib/x.so", 0, 0x10, MappingSpec("/lib/x.so", "b1"))], 2, 1, {})
    b.add([FrameSpec("g", "", "/lib/x.so", 0, 0x20, m)], 4, 1, {"a": "b"})
    p = b.to_proto()
    assert len(p.mapping) == 2 and len(p.location) == 2 and len(p.function) == 2  # + [gpu-agent]
    assert [list(s.value) for s in p.sample] == [[3, 2], [4, 1]]


def test_profiles_are_readable_by_their_owner_only(tmp_path):
    """Profiles name every tenant's processes, pods and kernels: written 0600."""
    path = tmp_path / "p.pb.gz"
    ProfileBuilder(period_ns=1, duration_ns=1, time_nanos=1).write(path)
    assert os.stat(path).st_mode & 0o777 == 0o600


def _locations_by_frame(proto) -> dict:
    """(function, line, address) -> location id, from a written profile."""
    st = proto.string_table
    fn = {f.id: st[f.name] for f in proto.function}
    return {(fn[loc.line[0].function_id], loc.line[0].line, loc.address): loc.id for loc in proto.location}


@needs_pprof
def test_numbered_windows_share_location_ids(tmp_path):
    """Windows written with one Numbering give a frame the same location id in every
    file, whatever order its samples came in; another numbering is named apart; Go
    pprof reads such a profile (ids need not be 1..N) to the same totals, and prints
    nothing of the numbering (issue 45: `-top` printed "gpu-agent numbering <id>", a
    comment then; a private field now, which protobuf readers skip)."""
    from gpu_agent.outputs.ui.views import RawProfile
    from gpu_agent.profile.pprof import Numbering

    numbering = Numbering()
    samples = list(build_profile()._samples.items())
    rebuilt = build_profile()

    def window(order, numbering):
        b = ProfileBuilder(period_ns=64, duration_ns=10, time_nanos=1, numbering=numbering)
        for (locs, lab), (ns, n, *_) in order:
            b.add([_frame_of(rebuilt, i) for i in locs], ns, n, dict(lab))
        return b

    builders = [window(samples, numbering), window(samples[::-1], numbering)]
    windows = [b.to_proto() for b in builders]
    a, b = (_locations_by_frame(w) for w in windows)
    assert a == b and a.keys() == _locations_by_frame(rebuilt.to_proto()).keys()
    # Without a numbering, the reversed window numbers its frames otherwise.
    unnumbered = [window(samples, None).to_proto(), window(samples[::-1], None).to_proto()]
    assert _locations_by_frame(unnumbered[0]) != _locations_by_frame(unnumbered[1])
    files = [RawProfile.FromString(gzip.decompress(b.to_bytes())) for b in builders]
    assert [f.numbering for f in files] == [numbering.id, numbering.id] and Numbering().id != numbering.id
    assert not any(w.comment for w in windows)
    path = tmp_path / "numbered.pb.gz"
    path.write_bytes(builders[1].to_bytes())
    out, _ = run_pprof("-raw", str(path), cwd=tmp_path)
    vals = [tuple(map(int, m)) for m in re.findall(r"^\s+(\d+)\s+(\d+): [\d ]+$", out, re.M)]
    assert sum(v[0] for v in vals) == TOTAL_NS and sum(v[1] for v in vals) == TOTAL_LAUNCHES
    top, _ = run_pprof("-top", str(path), cwd=tmp_path)
    assert "numbering" not in top and numbering.id not in top and numbering.id not in out, top


def _frame_of(builder: ProfileBuilder, location_id: int) -> FrameSpec:
    """The FrameSpec a builder interned as location_id (for re-adding its samples)."""
    p = builder.to_proto()
    st = p.string_table
    loc = next(loc for loc in p.location if loc.id == location_id)
    f = next(f for f in p.function if f.id == loc.line[0].function_id)
    m = next((m for m in p.mapping if m.id == loc.mapping_id), None)
    spec = (
        None
        if m is None
        else MappingSpec(
            st[m.filename],
            st[m.build_id],
            m.has_functions,
            m.has_filenames,
            m.has_line_numbers,
            m.memory_start,
            m.memory_limit,
            m.file_offset,
        )
    )
    sysname = st[f.system_name]
    return FrameSpec(
        st[f.name], "" if sysname == st[f.name] else sysname, st[f.filename], loc.line[0].line, loc.address, spec
    )
