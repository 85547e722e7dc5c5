"""Python-stack pieces without BPF: layouts, line tables, stamps, merging.

Against every CPython 3.10+ found on this machine (see test_python_stacks):
  * the 3.10-3.12 offset table and the _Py_DebugOffsets field order (offsets.py)
    agree with offsetof() compiled against that version's own headers (when installed);
  * layout.probe() finds and checks the interpreter of a live process
    (libpython and static builds);
  * our line-table decoders give, for every instruction, the line CPython's
    own co_lines() gives;
and GA_PY_STAMP (C) == contract.py_stamp, merge() splices runs correctly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gpu_agent.probes import contract as C
from gpu_agent.symbols.python import debug_offsets, layout, merge as M, offsets, symbolize as S
from gpu_agent.system.btf import task_offsets
from support.interpreters import SUPPORTED, TOO_OLD

REPO = Path(__file__).resolve().parent.parent
IDS = [s[0] for s in SUPPORTED]


def _include_dir(py: str) -> str | None:
    r = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], capture_output=True, text=True
    )
    d = r.stdout.strip()
    return d if d and os.path.isfile(os.path.join(d, "internal", "pycore_runtime.h")) else None


_OFFSETOF = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#define P(name, expr) printf("%s %lld\n", name, (long long)(expr))
int main(void) {
    P("rt_interp_head", offsetof(_PyRuntimeState, interpreters.head));
    P("interp_next", offsetof(PyInterpreterState, next));
    P("ts_next", offsetof(PyThreadState, next));
    P("ts_interp", offsetof(PyThreadState, interp));
    P("ts_thread_id", offsetof(PyThreadState, thread_id));
    P("co_filename", offsetof(PyCodeObject, co_filename));
    P("co_name", offsetof(PyCodeObject, co_name));
    P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("co_linetable", offsetof(PyCodeObject, co_linetable));
    P("ascii_size", sizeof(PyASCIIObject));
    P("compact_size", sizeof(PyCompactUnicodeObject));
    P("tp_basicsize", offsetof(PyTypeObject, tp_basicsize));
    P("tp_members", offsetof(PyTypeObject, tp_members));
#if PY_VERSION_HEX >= 0x030b0000
    P("interp_threads", offsetof(PyInterpreterState, threads.head));
    P("ts_native_tid", offsetof(PyThreadState, native_thread_id));
    P("fr_previous", offsetof(_PyInterpreterFrame, previous));
    P("fr_owner", offsetof(_PyInterpreterFrame, owner));
    P("co_qualname", offsetof(PyCodeObject, co_qualname));
    P("co_code", offsetof(PyCodeObject, co_code_adaptive));
#else
    P("interp_threads", offsetof(PyInterpreterState, tstate_head));
    P("ts_frame", offsetof(PyThreadState, frame));
    P("fr_previous", offsetof(PyFrameObject, f_back));
    P("fr_code", offsetof(PyFrameObject, f_code));
    P("fr_instr", offsetof(PyFrameObject, f_lasti));
#endif
#if PY_VERSION_HEX >= 0x030d0000
    P("ts_frame", offsetof(PyThreadState, current_frame));
    P("fr_code", offsetof(_PyInterpreterFrame, f_executable));
    P("fr_instr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("FRAME_OWNED_BY_CSTACK", FRAME_OWNED_BY_CSTACK);
#define D(sec, f) P("debug." #sec "." #f, offsetof(_Py_DebugOffsets, sec.f))
    D(runtime_state, interpreters_head); D(interpreter_state, next);
    D(interpreter_state, threads_head); D(thread_state, next); D(thread_state, thread_id);
    D(thread_state, native_thread_id); D(thread_state, current_frame);
    D(interpreter_frame, previous); D(interpreter_frame, executable);
    D(interpreter_frame, instr_ptr); D(interpreter_frame, owner);
    D(code_object, filename); D(code_object, qualname); D(code_object, firstlineno);
    D(code_object, linetable); D(code_object, co_code_adaptive);
    D(pyobject, ob_type); D(type_object, tp_name); D(unicode_object, length);
    D(unicode_object, asciiobject_size);
    P("debug.size", sizeof(_Py_DebugOffsets));
#elif PY_VERSION_HEX >= 0x030b0000
    P("ts_frame", offsetof(PyThreadState, cframe));
    P("cframe_frame", offsetof(_PyCFrame, current_frame));
    P("fr_code", offsetof(_PyInterpreterFrame, f_code));
    P("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
#if PY_VERSION_HEX >= 0x030c0000
    P("FRAME_OWNED_BY_CSTACK", FRAME_OWNED_BY_CSTACK);
#else
    P("fr_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
#endif
    return 0;
}
"""


@pytest.fixture(scope="module")
def header_offsets(tmp_path_factory):
    """version -> {name: value} from offsetof() against each interpreter's headers."""
    cc = shutil.which("gcc") or shutil.which("cc")
    out = {}
    d = tmp_path_factory.mktemp("pyoff")
    src = d / "off.c"
    src.write_text(_OFFSETOF)
    for ident, py, ver, _ in SUPPORTED:
        inc = _include_dir(py)
        if cc is None or inc is None or ver in out:
            continue
        exe = d / f"off-{ident}"
        r = subprocess.run([cc, "-w", "-I", inc, "-o", str(exe), str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            continue  # headers of a patched/odd build: covered by the live checks
        vals = {}
        for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines():
            k, v = line.split()
            vals[k] = int(v)
        out[ver] = vals
    return out


def test_table_matches_headers(header_offsets):
    checked = 0
    for ver, h in header_offsets.items():
        if ver not in offsets._TABLE:
            continue
        t = offsets._TABLE[ver]
        for k in (
            "rt_interp_head",
            "interp_next",
            "interp_threads",
            "ts_next",
            "ts_interp",
            "ts_thread_id",
            "ts_frame",
            "fr_previous",
            "fr_code",
            "fr_instr",
            "co_filename",
            "co_name",
            "co_firstlineno",
            "co_linetable",
        ):
            assert t[k] == h[k], (ver, k)
        assert t["ascii_size"] == h["ascii_size"] and t["compact_size"] == h["compact_size"]
        if ver >= (3, 11):
            assert (t["ts_native_tid"], t["co_qualname"], t["co_code"], t["cframe_frame"]) == (
                h["ts_native_tid"],
                h["co_qualname"],
                h["co_code"],
                h["cframe_frame"],
            ), ver
        if ver == (3, 11):
            assert t["fr_owner"] == h["fr_is_entry"]
        if ver >= (3, 12):
            assert t["fr_owner"] == h["fr_owner"]
            assert offsets.OWNER_SHIM == h["FRAME_OWNED_BY_CSTACK"]
        assert (h["tp_basicsize"], h["tp_members"]) == (offsets.TP_BASICSIZE, offsets.TP_MEMBERS)
        checked += 1
    if not checked:
        pytest.skip("no 3.10-3.12 headers installed")


def test_debug_offsets_field_order_matches_headers(header_offsets):
    checked = 0
    for ver, h in header_offsets.items():
        if ver < (3, 13):
            continue
        fields = {}
        pos = 24
        for sec, names in debug_offsets.debug_layout(ver[1]):
            for n in names:
                fields[f"{sec}.{n}"] = pos
                pos += 8
        for k, v in h.items():
            if k.startswith("debug.") and k != "debug.size":
                assert fields[k[6:]] == v, (ver, k)
        assert debug_offsets.debug_offsets_size(ver[1]) <= h["debug.size"]
        checked += 1
    if not checked:
        pytest.skip("no 3.13+ headers installed")


_LIVE = (
    "import threading, time\n"
    "def park():\n    time.sleep(30)\n"
    "threading.Thread(target=park, daemon=True).start()\n"
    "print('ready', flush=True)\ntime.sleep(30)\n"
)


@pytest.mark.parametrize("interp", SUPPORTED, ids=IDS)
def test_probe_live_process(interp):
    if os.geteuid() != 0:
        pytest.fail("reads another process's memory: run as root")
    ident, py, ver, static = interp
    p = subprocess.Popen([py, "-c", _LIVE], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        lay = layout.probe(p.pid)
        assert lay is not None
        assert lay.version[:2] == ver
        assert lay.interpreter.static == static
        assert "2 thread(s)" in lay.notes[0], lay.notes
        cfg = lay.config
        assert cfg.runtime and cfg.code_type and cfg.fr_size <= 256 and cfg.co_size <= 256
        if ver >= (3, 12):
            assert cfg.flags & C.PYC_OWNER
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not TOO_OLD, reason="no CPython < 3.10 installed")
def test_probe_refuses_older_python():
    _, py, ver, _ = TOO_OLD[0]
    p = subprocess.Popen([py, "-c", _LIVE], stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        with pytest.raises(layout.UnsupportedPython, match="3.10 or later"):
            layout.probe(p.pid)
    finally:
        p.kill()
        p.wait()


def test_probe_without_python_is_none():
    p = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        assert layout.probe(p.pid) is None
    finally:
        p.kill()
        p.wait()


def test_wrong_table_is_refused(monkeypatch):
    """A layout that disagrees with the live interpreter never reaches BPF."""
    if not SUPPORTED:
        pytest.skip("no CPython 3.10+")
    old = [s for s in SUPPORTED if s[2] in offsets._TABLE]
    if not old:
        pytest.skip("no 3.10-3.12 interpreter")
    _, py, ver, _ = old[0]
    bad = dict(offsets._TABLE[ver])
    bad["co_firstlineno"] += 4
    monkeypatch.setitem(offsets._TABLE, ver, bad)
    p = subprocess.Popen([py, "-c", _LIVE], stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()
        with pytest.raises(layout.UnsupportedPython, match="co_firstlineno"):
            layout.probe(p.pid)
    finally:
        p.kill()
        p.wait()


class _Session:
    """The two calls PythonStacks makes of BpfSession to turn a process's walks on and off."""

    def __init__(self):
        self.configs: dict = {}

    def set_py_config(self, pid, cfg):
        self.configs[pid] = cfg

    def del_py_config(self, pid):
        self.configs.pop(pid, None)


def _flaky_probe(monkeypatch, failures):
    """layout.probe as PythonStacks calls it, raising each of failures in turn first."""
    from gpu_agent import symbols

    calls, real = [], symbols.python.probe

    def probe(pid):
        calls.append(pid)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return real(pid)

    monkeypatch.setattr(symbols.python, "probe", probe)
    return calls


def test_a_set_up_that_fails_for_a_moment_is_tried_again_by_the_poll_loop(monkeypatch):
    """A probe races the process it reads (a frame popped between two reads, its maps
    read while they change). PythonStacks tries again from the poll loop, RETRY_S
    apart, not only when a new stack shows the eval loop: a short job's few stacks
    may all be named before that, and would stay native-only for its whole life."""
    if os.geteuid() != 0:
        pytest.fail("reads another process's memory: run as root")
    if not SUPPORTED:
        pytest.skip("no CPython 3.10+")
    from gpu_agent.symbols.python import PythonStacks

    calls = _flaky_probe(monkeypatch, [layout.Inconsistent("a frame's code is not a code object"), OSError("maps")])
    p = subprocess.Popen([SUPPORTED[0][1], "-c", _LIVE], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        session = _Session()
        stacks = PythonStacks(session)
        stacks.on_attach(p.pid)
        assert stacks.procs[p.pid].state == "pending" and len(calls) == 1
        stacks.retry_due()
        assert len(calls) == 1  # not before RETRY_S
        for want in ("pending", "python"):
            stacks.procs[p.pid].next_try = 0.0  # RETRY_S has passed
            stacks.retry_due()
            assert stacks.procs[p.pid].state == want, stacks.procs[p.pid]
        assert len(calls) == 3 and p.pid in session.configs
        assert stacks.counters()["python_processes"] == 1
    finally:
        p.kill()
        p.wait()


def test_a_set_up_that_keeps_failing_gives_up_and_an_exit_before_it_is_counted(monkeypatch, caplog):
    if not SUPPORTED:
        pytest.skip("no CPython 3.10+")
    from gpu_agent.symbols import python as P

    _flaky_probe(monkeypatch, [layout.Inconsistent("a thread state does not point back")] * P.MAX_TRIES)
    stacks = P.PythonStacks(_Session())
    stacks.on_attach(4242)
    for _ in range(2 * P.MAX_TRIES):
        stacks.procs[4242].next_try = 0.0
        stacks.retry_due()
    assert stacks.procs[4242].state == "unsupported" and stacks.procs[4242].tries == P.MAX_TRIES
    assert stacks.counters()["python_unsupported"] == 1
    assert "10 tries" in caplog.text

    _flaky_probe(monkeypatch, [OSError("cannot read /proc/4343/maps")] * P.MAX_TRIES)
    stacks.on_attach(4343)
    stacks.on_exit(4343)
    assert stacks.counters()["python_not_set_up"] == 1
    assert "Python stacks not set up (1 try): cannot read /proc/4343/maps" in caplog.text


# ---- line tables against CPython's own co_lines() ----

_DUMP = r"""
import json, sys
def walk(co, out):
    out.append({"name": co.co_name, "first": co.co_firstlineno,
                "table": co.co_linetable.hex(), "ncode": len(co.co_code),
                "lines": [list(t) for t in co.co_lines()]})
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            walk(c, out)
out = []
for path in sys.argv[1:]:
    walk(compile(open(path).read(), path, "exec"), out)
json.dump(out, sys.stdout)
"""


@pytest.mark.parametrize("interp", SUPPORTED, ids=IDS)
def test_linetable_decoder_matches_co_lines(interp, tmp_path):
    _, py, ver, _ = interp
    # Real code with long jumps, comprehensions, lambdas, try/except, big line gaps.
    gap = tmp_path / "gaps.py"
    gap.write_text(
        "def far():\n    x = 1\n" + "\n" * 300 + "    y = 2\n" + "\n" * 5000 + "    return (x,\n            y)\n"
    )
    files = [
        str(REPO / "tests" / "py_workload.py"),
        str(REPO / "agent" / "gpu_agent" / "join" / "collector.py"),
        str(gap),
    ]
    r = subprocess.run([py, "-c", _DUMP, *files], capture_output=True, text=True, check=True)
    codes = json.loads(r.stdout)
    assert len(codes) > 20
    decode = S.linetable_310 if ver == (3, 10) else S.linetable_311
    for co in codes:
        ranges = decode(bytes.fromhex(co["table"]), co["first"])
        want = {}
        for start, end, line in co["lines"]:
            for off in range(start, end, 2):
                want[off] = line
        for off in range(0, co["ncode"], 2):
            assert S.line_for(ranges, off) == want.get(off), (co["name"], off)


# ---- stamps, merging, BTF ----


def test_stamp_macro_matches_python(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    cases = [(0, 0, 0), (0x6E665F6168706C61, 8, 1), (2**64 - 1, 2**32 - 1, 2**31 - 1), (0x1234, 5, -1 & 0xFFFFFFFF)]
    src = tmp_path / "stamp.c"
    body = "\n".join(f'printf("%llu\\n", (unsigned long long)GA_PY_STAMP({a}ull, {b}u, {c}u));' for a, b, c in cases)
    src.write_text('#include <stdio.h>\n#include "gpu_agent_probes.h"\nint main(void){\n' + body + "\nreturn 0;}\n")
    exe = tmp_path / "stamp"
    subprocess.run([cc, "-I", str(REPO / "shim" / "include"), "-o", str(exe), str(src)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert got == [C.py_stamp(a, b, c) for a, b, c in cases]


class _N:
    def __init__(self, function):
        self.function = function


class _P:
    def __init__(self, name, entry):
        self.function, self.entry = name, entry


def _names(frames):
    return [f.function for f in frames]


def test_merge_replaces_each_eval_frame_with_its_run():
    native = [
        _N(n)
        for n in (
            "cuLaunchKernel",
            "ffi_call",
            "_PyEval_EvalFrameDefault",
            "gen_iternext",
            "_PyEval_EvalFrameDefault.cold",
            "Py_RunMain",
            "main",
        )
    ]
    py = [_P("launch", False), _P("gen", True), _P("forward", False), _P("<module>", True)]
    assert _names(M.merge(native, py)) == [
        "cuLaunchKernel",
        "ffi_call",
        "launch",
        "gen",
        "gen_iternext",
        "forward",
        "<module>",
        "Py_RunMain",
        "main",
    ]


def test_merge_mismatches_keep_every_frame_in_order():
    native = [_N("cuLaunchKernel"), _N("_PyEval_EvalFrameDefault"), _N("main")]
    py = [_P("a", True), _P("b", True), _P("c", True)]
    # More runs than eval frames: the rest right after the last replaced one.
    assert _names(M.merge(native, py)) == ["cuLaunchKernel", "a", "b", "c", "main"]
    # ... or at the outer end when the native stack was cut.
    assert _names(M.merge(native, py, native_truncated=True)) == ["cuLaunchKernel", "a", "main", "b", "c"]
    # More eval frames than runs: the extra eval frames stay.
    native2 = native[:2] + [_N("_PyEval_EvalFrameDefault")] + native[2:]
    assert _names(M.merge(native2, py[:1])) == ["cuLaunchKernel", "a", "_PyEval_EvalFrameDefault", "main"]
    # No Python frames: untouched.
    assert M.merge(native, []) == native


def test_btf_gives_the_task_struct_offsets():
    import platform

    if platform.machine() != "x86_64" or not os.path.exists("/sys/kernel/btf/vmlinux"):
        pytest.skip("x86_64 with kernel BTF only")
    got = task_offsets()
    assert got.fsbase is not None and 1000 < got.fsbase < 20000
    # comm and group_leader are task_struct's own members, both past its first
    # kilobyte (state, stack, flags ... mm come first) and 8 apart from neither
    assert got.comm is not None and got.group_leader is not None
    assert 500 < got.group_leader < 20000 and 500 < got.comm < 20000 and got.comm != got.group_leader


def test_debug_offsets_314_variants_are_told_apart():
    """A 3.14+ build lacking some of the optional fields parses right, from live anchors."""
    import struct as st

    truth = [
        (
            sec,
            [
                f
                for f in fields
                if (sec, f)
                not in {
                    ("interpreter_state", "code_object_generation"),
                    ("interpreter_state", "tlbc_generation"),
                    ("code_object", "co_tlbc"),
                }
            ],
        )
        for sec, fields in debug_offsets._DEBUG_314
    ]
    vals = {
        "pyobject.size": 16,
        "pyobject.ob_type": 8,
        "type_object.tp_name": 24,
        "unicode_object.length": 16,
        "unicode_object.asciiobject_size": 40,
        "code_object.size": 224,
        "code_object.filename": 112,
        "code_object.name": 120,
        "code_object.qualname": 128,
        "code_object.firstlineno": 68,
        "code_object.linetable": 136,
        "code_object.co_code_adaptive": 208,
        "thread_state.current_frame": 72,
        "interpreter_state.threads_head": 7000,
        "interpreter_frame.owner": 74,
        "thread_state.prev": 0,
        "thread_state.next": 8,
        "thread_state.interp": 16,
        "interpreter_frame.executable": 0,
        "interpreter_frame.previous": 8,
    }
    raw = bytearray(debug_offsets.DEBUG_COOKIE + st.pack("<QQ", 0x030E00F0, 0))
    n = 1000
    for sec, fields in truth:
        for f in fields:
            n += 1
            raw += st.pack("<Q", vals.get(f"{sec}.{f}", n))
    raw += bytes(8 * 16)  # whatever follows in _PyRuntime
    members = {"co_filename": 112, "co_name": 120, "co_qualname": 128, "co_firstlineno": 68, "co_linetable": 136}
    got = [debug_offsets.parse_debug_offsets(bytes(raw), 14, lay) for lay in debug_offsets.debug_candidates(14)]
    ok = [d for d in got if debug_offsets._plausible(d, members)]
    assert ok
    for d in ok:  # every accepted parse agrees on what the walker uses
        assert d["thread_state.current_frame"] == 72
        assert d["interpreter_state.threads_head"] == 7000
        assert d["interpreter_frame.owner"] == 74
        assert d["code_object.co_code_adaptive"] == 208
    # The declared layout itself is refused for this blob (it is misaligned).
    assert not debug_offsets._plausible(debug_offsets.parse_debug_offsets(bytes(raw), 14), members)
