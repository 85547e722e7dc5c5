"""Symbolizer tests against real processes built with gcc/g++ in a tmp dir."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gpu_agent.symbols.demangle import demangle_kernel
from gpu_agent.symbols.native import Frame, Symbolizer, parse_maps

if shutil.which("gcc") is None or shutil.which("g++") is None or shutil.which("nm") is None:
    raise RuntimeError("tests/test_symbolize.py needs gcc, g++ and nm (make deps installs them)")

MAIN_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
extern void *foo_addr(void);
__attribute__((noinline)) void main_marker_fn(void) { __asm__ volatile(""); }
int main(void) {
    printf("main %p\n", (void *)&main_marker_fn);
    printf("foo %p\n", foo_addr());
    fflush(stdout);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, "quit")) break;
        char *sym = strchr(line, '|');
        *sym++ = 0;
        void *h = dlopen(line, RTLD_NOW);
        void *s = h ? dlsym(h, sym) : NULL;
        printf("sym %p\n", s);
        fflush(stdout);
    }
    return 0;
}
"""

FOO_CPP = r"""
namespace ns {
struct Widget { int compute(int x); };
__attribute__((noinline)) int Widget::compute(int x) { __asm__ volatile(""); return x * 3 + 1; }
}
extern "C" void *foo_addr(void) {
    int (ns::Widget::*pm)(int) = &ns::Widget::compute;
    void *p;
    __builtin_memcpy(&p, &pm, sizeof p);  /* non-virtual: ptr-to-member = address */
    return p;
}
"""

BAR_C = r"""
__attribute__((noinline)) int bar_late_fn(int x) { __asm__ volatile(""); return x + 7; }
"""

GONE_C = r"""
__attribute__((noinline)) int gone_fn(int x) { __asm__ volatile(""); return x - 7; }
"""

STRIPPED_C = r"""
__attribute__((noinline)) int stripped_exported_fn(int x) { __asm__ volatile(""); return x ^ 5; }
"""


def _sh(*args, **kw):
    subprocess.run(args, check=True, **kw)


def _nm(path, sym, dynamic=False):
    out = subprocess.run(["nm", "-D" if dynamic else "-a", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == sym:
            return int(parts[0], 16)
    raise AssertionError(f"{sym} not in nm {path}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("symb")
    (d / "main.c").write_text(MAIN_C)
    (d / "foo.cpp").write_text(FOO_CPP)
    (d / "bar.c").write_text(BAR_C)
    (d / "gone.c").write_text(GONE_C)
    (d / "stripped.c").write_text(STRIPPED_C)
    _sh("g++", "-O1", "-fPIC", "-shared", "-o", d / "libfoo.so", d / "foo.cpp")
    _sh("gcc", "-O1", "-fPIC", "-shared", "-o", d / "libbar.so", d / "bar.c")
    _sh("gcc", "-O1", "-fPIC", "-shared", "-o", d / "libgone.so", d / "gone.c")
    _sh("gcc", "-O1", "-fPIC", "-shared", "-s", "-o", d / "libstripped.so", d / "stripped.c")
    common = [d / "main.c", "-L", d, "-lfoo", f"-Wl,-rpath,{d}", "-ldl"]
    _sh("gcc", "-O1", "-fPIE", "-pie", "-o", d / "main_pie", *common)
    _sh("gcc", "-O1", "-fno-pie", "-no-pie", "-o", d / "main_nopie", *common)
    return d


class Proc:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.pid = self.p.pid
        self.main = int(self._read("main"), 16)
        self.foo = int(self._read("foo"), 16)

    def _read(self, tag):
        line = self.p.stdout.readline().split()
        assert line and line[0] == tag, line
        return line[1]

    def dlopen(self, path, sym):
        self.p.stdin.write(f"{path}|{sym}\n")
        self.p.stdin.flush()
        return int(self._read("sym"), 16)

    def quit(self):
        if self.p.poll() is None:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(5)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def proc_factory():
    procs = []

    def make(argv):
        p = Proc(argv)
        procs.append(p)
        return p

    yield make
    for p in procs:
        p.kill()


def _check(frame: Frame, function, path, rel):
    assert frame.function == function, frame
    assert os.path.realpath(frame.filename) == os.path.realpath(path), frame
    assert frame.rel_addr == rel, (hex(frame.rel_addr), hex(rel), frame)


@pytest.mark.parametrize("exe", ["main_pie", "main_nopie"])
def test_main_binary_and_cpp_library(built, proc_factory, exe):
    p = proc_factory([str(built / exe)])
    sym = Symbolizer(resnapshot_interval_s=0)
    assert sym.snapshot(p.pid)
    main_rel = _nm(built / exe, "main_marker_fn")
    foo_rel = _nm(built / "libfoo.so", "_ZN2ns6Widget7computeEi")
    if exe == "main_nopie":
        assert p.main == main_rel  # non-PIE: runtime address == link address
    # ip is a return address: ip - 1 is looked up.  ip = fn+1 -> fn itself,
    # ip = fn+3 -> fn+2 (inside the function).
    frames = sym.symbolize(p.pid, [p.main + 1, p.foo + 1, p.foo + 3])
    _check(frames[0], "main_marker_fn", built / exe, main_rel)
    _check(frames[1], "ns::Widget::compute(int)", built / "libfoo.so", foo_rel)
    _check(frames[2], "ns::Widget::compute(int)", built / "libfoo.so", foo_rel + 2)
    assert frames[1].system_name == "_ZN2ns6Widget7computeEi"
    assert frames[0].system_name == "main_marker_fn"
    assert frames[1].build_id and len(frames[1].build_id) >= 16
    assert frames[1].build_id == frames[2].build_id
    assert frames[0].line == 0


def test_dlopen_after_snapshot_deleted_and_stripped(built, proc_factory, tmp_path):
    p = proc_factory([str(built / "main_pie")])
    sym = Symbolizer(resnapshot_interval_s=0)
    assert sym.snapshot(p.pid)
    bar = p.dlopen(built / "libbar.so", "bar_late_fn")
    # Not in the snapshot: the miss triggers a re-snapshot.
    [f] = sym.symbolize(p.pid, [bar + 1])
    _check(f, "bar_late_fn", built / "libbar.so", _nm(built / "libbar.so", "bar_late_fn"))

    # A library deleted after dlopen: read through /proc/PID/map_files.
    gone = tmp_path / "libgone.so"
    shutil.copy(built / "libgone.so", gone)
    gone_rel = _nm(gone, "gone_fn")
    addr = p.dlopen(gone, "gone_fn")
    os.unlink(gone)
    [f] = sym.symbolize(p.pid, [addr + 1])
    assert f.function == "gone_fn" and f.rel_addr == gone_rel, f
    assert f.filename == str(gone)

    # A stripped library: .dynsym fallback.
    addr = p.dlopen(built / "libstripped.so", "stripped_exported_fn")
    [f] = sym.symbolize(p.pid, [addr + 1])
    assert f.function == "stripped_exported_fn", f
    assert f.rel_addr == _nm(built / "libstripped.so", "stripped_exported_fn", dynamic=True)


def test_miss_rate_limit_and_unknown(built, proc_factory):
    p = proc_factory([str(built / "main_pie")])
    sym = Symbolizer(resnapshot_interval_s=3600)
    sym.snapshot(p.pid)
    bar = p.dlopen(built / "libbar.so", "bar_late_fn")
    # Re-snapshot rate-limited: the late library is not yet known -> unknown frame.
    [f] = sym.symbolize(p.pid, [bar + 1])
    assert f.function == f"0x{bar:x} [unknown]" and f.filename == "[unknown]"
    sym.snapshot(p.pid)  # explicit re-snapshot always happens
    [f] = sym.symbolize(p.pid, [bar + 1])
    assert f.function == "bar_late_fn"
    # Addresses outside any mapping / not in any symbol never raise.
    frames = sym.symbolize(p.pid, [0, 1, 0x10, 2**64 - 1])
    assert all(fr.filename == "[unknown]" for fr in frames)
    assert sym.symbolize(2**22 + 12345, [0x1234])[0].function == "0x1233 [unknown]"


def test_frames_survive_process_exit(built, proc_factory):
    p = proc_factory([str(built / "main_pie")])
    sym = Symbolizer(resnapshot_interval_s=0)
    sym.snapshot(p.pid)
    p.quit()
    frames = sym.symbolize(p.pid, [p.main + 1, p.foo + 1])
    assert [f.function for f in frames] == ["main_marker_fn", "ns::Widget::compute(int)"]


def test_a_zombie_s_empty_maps_do_not_replace_its_snapshot(built, proc_factory):
    """An exited process not yet reaped reads as no maps, without an error: a second
    snapshot then (the agent's first event of a short process, after its attach
    note's snapshot) emptied what the first had read, and every frame, the main
    executable's too, read [unknown]."""
    p = proc_factory([str(built / "main_pie")])
    sym = Symbolizer(resnapshot_interval_s=0)
    assert sym.snapshot(p.pid)
    p.p.stdin.write("quit\n")
    p.p.stdin.flush()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not Path(f"/proc/{p.pid}/stat").read_text().split(") ")[1].startswith("Z"):
        time.sleep(0.01)  # exited, not reaped: a zombie
    assert Path(f"/proc/{p.pid}/maps").read_text() == ""
    assert not sym.snapshot(p.pid)
    frames = sym.symbolize(p.pid, [p.main + 1, p.foo + 1])
    assert [f.function for f in frames] == ["main_marker_fn", "ns::Widget::compute(int)"]
    p.p.wait(5)


def test_other_mount_namespace(built, proc_factory, tmp_path):
    """A library only visible inside the process' mount namespace (container)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    stage = tmp_path / "stage"
    stage.mkdir()
    shutil.copy(built / "libbar.so", stage / "libns.so")
    script = f"mount -t tmpfs none {hidden} && cp {stage}/libns.so {hidden}/libns.so && exec {built / 'main_pie'}"
    try:
        p = proc_factory(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    except AssertionError:
        pytest.skip("unshare -m not permitted here")
    sym = Symbolizer(resnapshot_interval_s=0)
    sym.snapshot(p.pid)
    addr = p.dlopen(hidden / "libns.so", "bar_late_fn")
    assert not (hidden / "libns.so").exists()  # not visible from our namespace
    os.unlink(stage / "libns.so")
    [f] = sym.symbolize(p.pid, [addr + 1])
    assert f.function == "bar_late_fn", f
    assert f.filename == str(hidden / "libns.so")


def test_symbol_table_cache_is_bounded(built, proc_factory):
    p = proc_factory([str(built / "main_pie")])
    sym = Symbolizer(max_tables=1, resnapshot_interval_s=0)
    sym.snapshot(p.pid)
    for _ in range(3):
        frames = sym.symbolize(p.pid, [p.main + 1, p.foo + 1])
        assert [f.function for f in frames] == ["main_marker_fn", "ns::Widget::compute(int)"]
        assert len(sym._tables) == 1


def test_parse_maps():
    text = (
        "55d0c0000000-55d0c0001000 r--p 00000000 08:01 100 /usr/bin/app\n"
        "55d0c0001000-55d0c0002000 r-xp 00001000 08:01 100 /usr/bin/app\n"
        "7f0000000000-7f0000001000 r-xp 00002000 08:01 200 /tmp/lib x.so (deleted)\n"
        "7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]\n"
        "7ffd00002000-7ffd00003000 rwxp 00000000 00:00 0 \n"
    )
    maps = parse_maps(text)
    assert [(m.start, m.offset, m.path, m.deleted) for m in maps] == [
        (0x55D0C0001000, 0x1000, "/usr/bin/app", False),
        (0x7F0000000000, 0x2000, "/tmp/lib x.so", True),
    ]


def _long_kernel_source(n_types=24, ident_len=240):
    lines = ["namespace cutlass_like {"]
    for i in range(n_types):
        name = f"T{i}_" + "x" * ident_len
        lines.append(f"template <int N> struct {name} {{}};")
    lines.append("template <typename... Ts> __attribute__((noinline)) void kern(float *p) { p[0] += sizeof...(Ts); }")
    lines.append("}")
    args = ",".join(f"cutlass_like::T{i}_{'x' * ident_len}<{i}>" for i in range(n_types))
    lines.append(f"void use(float *p) {{ cutlass_like::kern<{args}>(p); }}")
    return "\n".join(lines), args


def test_demangle_long_kernel_name(tmp_path):
    src, args = _long_kernel_source()
    (tmp_path / "k.cpp").write_text(src)
    _sh("g++", "-c", "-o", tmp_path / "k.o", tmp_path / "k.cpp")
    out = subprocess.run(["nm", tmp_path / "k.o"], check=True, capture_output=True, text=True).stdout
    [mangled] = [l.split()[-1] for l in out.splitlines() if "kern" in l]
    assert len(mangled) > 6000
    expect = "void cutlass_like::kern<" + args.replace(",", ", ") + " >(float*)"
    assert demangle_kernel(mangled) == expect
    assert demangle_kernel(mangled.encode() + b"\0trailing") == expect
    assert len(expect) > 6000


def test_demangle_deep_pack_and_failures(tmp_path):
    # ~150 template args: beyond libstdc++ __cxa_demangle's recursion limit;
    # the libbfd fallback (when present) demangles it, else the raw name.
    args = ",".join(f"ns::Tag<{i}>" for i in range(150))
    src = (
        "namespace ns { template<int N> struct Tag{}; template<typename... T> "
        "__attribute__((noinline)) void kern(float*p){ p[0]+=sizeof...(T);} }\n"
        f"void f(float*p){{ ns::kern<{args}>(p); }}\n"
    )
    (tmp_path / "d.cpp").write_text(src)
    _sh("g++", "-c", "-o", tmp_path / "d.o", tmp_path / "d.cpp")
    out = subprocess.run(["nm", tmp_path / "d.o"], check=True, capture_output=True, text=True).stdout
    [mangled] = [l.split()[-1] for l in out.splitlines() if "kern" in l]
    d = demangle_kernel(mangled)
    assert d == mangled or d == "void ns::kern<" + args.replace(",", ", ") + " >(float*)"
    assert demangle_kernel("vectorAdd") == "vectorAdd"
    assert demangle_kernel(b"_Z_not_valid!!") == "_Z_not_valid!!"
    assert demangle_kernel(b"\xff\xfe_raw") == "\ufffd\ufffd_raw"
    assert demangle_kernel("_Z6kernelPfi") == "kernel(float*, int)"


def test_symbol_table_lookup_rules():
    from gpu_agent.symbols.symtab import SymbolTable

    t = SymbolTable(
        [
            (0x1000, 0x10, b"__printf", 1),
            (0x1000, 0x10, b"printf", 1),
            (0x1000, 0x10, b"_IO_printf", 1),
            (0x1000, 0x10, b"printf_local", 0),
            (0x2000, 0, b"asm_label", 1),  # size 0: nearest preceding
            (0x3000, 0x8, b"_ZN1a1bEv", 1),
        ]
    )
    assert t.lookup(0x1000) == ("printf", "printf")
    assert t.lookup(0x100F)[0] == "printf"
    assert t.lookup(0x1010) is None  # past the end of a sized symbol
    assert t.lookup(0x2FFF)[0] == "asm_label"
    assert t.lookup(0x3004) == ("a::b()", "_ZN1a1bEv")
    assert t.lookup(0xFFF) is None


def test_a_symbol_table_keeps_no_object_per_name():
    """PyTorch's CUDA libraries hold 10^5..10^6 function symbols; a bytes object per
    name cost ~140 bytes per symbol and pushed the agent past 400 MiB. The table
    keeps addresses, sizes and name offsets in arrays and reads a name from the
    string table only when an address resolves to it."""
    import tracemalloc
    from array import array

    from gpu_agent.symbols.symtab import SymbolTable

    n = 100_000
    names = [b"_ZN5torch%d%sEv" % (len(b"kernel%d" % i), b"kernel%d" % i) for i in range(n)]
    strtab = b"\0" + b"\0".join(names) + b"\0"
    offs, pos = array("Q"), 1
    for name in names:
        offs.append(pos)
        pos += len(name) + 1
    addrs = array("Q", range(0x10000, 0x10000 + 16 * n, 16))
    sizes = array("Q", [16] * n)
    binds = array("B", [1] * n)
    tracemalloc.start()
    try:
        t = SymbolTable(raw=(addrs, sizes, offs, binds, strtab, len(strtab)))
        kept, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t) == n
    assert kept / n < 40, kept / n  # three 8-byte arrays; was ~140 with a bytes per name
    assert t.lookup(0x10000 + 16 * 777 + 3) == ("torch::kernel777()", "_ZN5torch9kernel777Ev")


def test_one_maps_parser_serves_every_reader():
    """procfs.parse_maps is the one reader of /proc/PID/maps: odd paths, deleted
    files, anonymous lines and the device number come out the same for the
    symbolizer, the Python layout and shim discovery."""
    import os

    from gpu_agent.system import procfs

    text = (
        b"7f0000000000-7f0000001000 r-xp 00002000 fd:01 200 /tmp/a b/libgpu_agent_shim.so (deleted)\n"
        b"7f0000001000-7f0000002000 rw-p 00000000 00:00 0 \n"
        b"7f0000002000-7f0000003000 r-xp 00000000 08:01 300 /opt/\xff.so\n"
        b"garbage line\n"
    )
    e = procfs.parse_maps(text)
    assert len(e) == 3
    assert e[0].path == "/tmp/a b/libgpu_agent_shim.so" and e[0].deleted
    assert e[0].dev == os.makedev(0xFD, 1) and e[0].inode == 200 and e[0].offset == 0x2000
    assert e[0].range == "7f0000000000-7f0000001000"
    assert not e[1].file_backed and e[1].path == ""
    assert e[2].path.encode("utf-8", "surrogateescape") == b"/opt/\xff.so"
    assert procfs.read_maps(2**22 + 12345) is None  # no such process


def test_stacks_gone_from_bpf_are_counted_once_each():
    """[stack unavailable] in a profile (43 % of one Llama run's GPU time on an H200,
    cause not yet known) is counted where it is made: a stack id whose BPF entry is
    gone (stacks_missing, once per stack however often profiles ask), and a stack
    stored with no native frame (stacks_without_native), which keeps its Python
    frames instead of reading unavailable."""
    from gpu_agent.join.stacks import StackNames

    class Session:
        parcagpu = None

        def get_stack(self, tgid, stack_id, start):
            return {1: None, 2: [0, 0]}.get(stack_id)

    names = StackNames(Session(), python_stacks=False)
    for _ in range(3):
        assert [f.function for f in names.specs(os.getpid(), 1, 5)] == ["[stack unavailable]"]
    names.specs(os.getpid(), 2, 5)
    assert names.counts == {"stacks_missing": 1, "stacks_without_native": 1}
    names.forget({os.getpid()})
    names.specs(os.getpid(), 1, 5)
    assert names.counts["stacks_missing"] == 2  # a new process's, once more
