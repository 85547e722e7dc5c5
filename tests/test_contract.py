"""The probe contract: header (gcc) == contract.py (ctypes) == shim's .note.stapsdt.

The header's probe table (GA_PROBE_TABLE) is the one source of every probe's name
and arguments: the shim's fire helpers and the test firer are generated from it,
and these tests check contract.PROBES, both stapsdt notes and the BPF program's
argument reads against it."""

from __future__ import annotations

import ctypes as ct
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_agent.probes import contract as C
from support.probes import check_shim_notes

REPO = Path(__file__).resolve().parent.parent
HEADER = REPO / "shim" / "include" / "gpu_agent_probes.h"
PY_HEADER = HEADER.parent / "gpu_agent_python.h"  # included by HEADER
PG_HEADER = HEADER.parent / "gpu_agent_parcagpu.h"  # included by HEADER
PC_HEADER = HEADER.parent / "gpu_agent_pcsampling.h"  # included by HEADER


def header_text() -> str:
    return HEADER.read_text() + PY_HEADER.read_text() + PG_HEADER.read_text() + PC_HEADER.read_text()


SHIM = REPO / "build" / "libgpu_agent_shim.so"
BPF_SOURCE = REPO / "bpf" / "gpu_agent.bpf.c"


def _c_layout_program() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "gpu_agent_probes.h"', "int main(void) {"]
    for cname, py in C.STRUCTS.items():
        lines.append(f'printf("size {cname} %zu\\n", sizeof(struct {cname}));')
        for fname, *_ in py._fields_:
            lines.append(
                f'printf("off {cname}.{fname} %zu %zu\\n", '
                f"offsetof(struct {cname}, {fname}), "
                f"sizeof(((struct {cname} *)0)->{fname}));"
            )
    for ename, py in C.ENUMS.items():
        for member in py:
            lines.append(f'printf("enum {member.name} %lld\\n", (long long){member.name});')
    for name in C.CONSTANTS:
        lines.append(f'printf("const {name} %llu\\n", (unsigned long long)({name}));')
    for name in C.STRING_CONSTANTS:
        lines.append(f'printf("str {name} %s\\n", {name});')
    lines += [
        "#define STR_(...) #__VA_ARGS__",
        "#define STR(...) STR_(__VA_ARGS__)",
        '#define PRINT_PROBE(name, n, ...) printf("probe " #name " %d %s\\n", n, STR(__VA_ARGS__));',
        "GA_PROBE_TABLE(PRINT_PROBE)",
    ]
    lines += ["return 0;", "}"]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, tuple]:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler (make deps installs one)")
    d = tmp_path_factory.mktemp("contract")
    src = d / "layout.c"
    src.write_text(_c_layout_program())
    exe = d / "layout"
    subprocess.run(
        [cc, "-Wall", "-Werror", "-Wno-comment", "-I", str(HEADER.parent), "-o", str(exe), str(src)], check=True
    )
    out = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        if line.startswith("probe "):
            _, name, n, args = (line + " ").split(" ", 3)
            out[("probe", name)] = (int(n), args.strip())
            continue
        kind, name, *vals = line.split()
        out[(kind, name)] = tuple(vals)
    return out


def test_struct_layouts(c_layout):
    for cname, py in C.STRUCTS.items():
        assert int(c_layout[("size", cname)][0]) == ct.sizeof(py), cname
        for fname, *_ in py._fields_:
            off, size = map(int, c_layout[("off", f"{cname}.{fname}")])
            field = getattr(py, fname)
            assert (field.offset, field.size) == (off, size), f"{cname}.{fname}"


def test_every_header_struct_is_mirrored():
    structs = set(re.findall(r"^struct (\w+) \{", header_text(), re.M))
    assert structs == set(C.STRUCTS)


def test_enums_and_constants(c_layout):
    for py in C.ENUMS.values():
        for member in py:
            assert int(c_layout[("enum", member.name)][0]) == int(member), member.name
    for name, val in C.CONSTANTS.items():
        assert int(c_layout[("const", name)][0]) == val, name
    for name, val in C.STRING_CONSTANTS.items():
        assert c_layout[("str", name)][0] == val, name


def test_every_header_enum_member_is_mirrored():
    text = header_text()
    for ename, py in C.ENUMS.items():
        body = re.search(r"enum %s \{(.*?)\};" % ename, text, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        names = re.findall(r"^\s*(GA_\w+)", body, re.M)
        assert names == [m.name for m in py], ename


def test_every_header_constant_is_mirrored():
    defines = set(re.findall(r"^#define (GA_\w+)\s+\S", header_text(), re.M))
    assert defines == set(C.CONSTANTS) | set(C.STRING_CONSTANTS)


def _header_probe_list() -> dict[str, list[tuple[str, str]]]:
    """Parse the probe list out of the headers' comment blocks (PC sampling's in its own)."""
    text, pc_text = HEADER.read_text(), PC_HEADER.read_text()
    block = (
        text[text.index("Probes (name: arguments, in order):") : text.index("*/")]
        + pc_text[pc_text.index("Probes:") : pc_text.index("*/")]
    )
    block = re.sub(r"^\s*\*", "", block, flags=re.M)
    probes = {}
    for m in re.finditer(r"^\s{2,3}(\w+)\s+\(([^)]*)\)", block, re.M):
        name, args = m.group(1), m.group(2)
        parsed = []
        if "no arguments" not in args:
            for a in args.split(","):
                a = " ".join(a.split())
                t = "ptr" if "*" in a else a.split()[0]
                parsed.append((a.replace("*", " ").split()[-1], t))
        probes[name] = parsed
    return probes


def _table_probes(c_layout) -> dict[str, list[tuple[str, str]]]:
    """GA_PROBE_TABLE as the C preprocessor expands it: name -> [(arg, u32|u64|ptr)]."""
    probes = {}
    for (kind, name), (n, args) in ((k, v) for k, v in c_layout.items() if k[0] == "probe"):
        parsed = [
            (arg, "ptr" if "*" in typ else typ.strip().removeprefix("ga_"))
            for typ, arg in re.findall(r"\(([^,()]+),\s*(\w+)\)", args)
        ]
        assert len(parsed) == n, f"{name}: the table says {n} arguments, lists {args!r}"
        probes[name] = parsed
    return probes


def test_probe_table_is_the_contract(c_layout):
    """contract.PROBES mirrors the table: names, order, argument names and kinds."""
    assert _table_probes(c_layout) == {n: list(a) for n, a in C.PROBES.items()}


def test_bpf_reads_each_probe_argument_at_its_table_position(c_layout):
    """Each BPF program reads argument i into the variable the table names at i, and
    reads every argument of its probe: a reordered or missing read fails here."""
    from gpu_agent.probes.shim_attach import DATA_PROBES
    from gpu_agent.probes.paths import bpf_source

    src = bpf_source(BPF_SOURCE.parent)  # with its local headers pasted in, as bcc gets it
    table = _table_probes(c_layout)
    assert set(DATA_PROBES) | set(C.SEMAPHORE_PROBES) == set(table)
    for probe, fn in DATA_PROBES.items():
        m = re.search(rf"^int {fn}\(struct pt_regs \*ctx\)\n\{{(.*?)^\}}", src, re.S | re.M)
        assert m, f"no BPF function {fn} for probe {probe}"
        reads = [(int(i), var) for i, var in re.findall(r"bpf_usdt_readarg\((\d+),\s*ctx,\s*&(\w+)\)", m.group(1))]
        want = [(i + 1, arg) for i, (arg, _) in enumerate(table[probe])]
        assert reads == want, f"{fn} reads {reads}, the table says {want}"


def test_probe_list_matches_header_comment():
    """The header's prose (what each probe means) names the table's arguments."""
    assert _header_probe_list() == {n: list(a) for n, a in C.PROBES.items()}


def test_shim_stapsdt_notes():
    if not SHIM.exists():
        pytest.fail(f"{SHIM} not built (make shim)")
    check_shim_notes(SHIM)


def test_probe_firer_stapsdt_notes(tmp_path):
    """The test firer must present the same contract as the shim."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "probe_firer"))
    import firer_script as script

    if shutil.which("gcc") is None:
        pytest.fail("no gcc (make deps installs it)")
    lib, _ = script.build(tmp_path)
    check_shim_notes(lib)


def test_a_shim_of_another_contract_version_is_refused_with_one_clear_line(tmp_path):
    """The shim exports its contract version; the agent reads it from the file before
    it reads any probe, and refuses another version (or none) in one line."""
    import mmap as _mmap

    from elftools.elf.elffile import ELFFile

    from gpu_agent.system import elf
    from gpu_agent.probes.shim_attach import BpfError, read_shim

    probes, _ = read_shim(str(SHIM))  # this build: accepted
    assert set(probes) == set(C.PROBES)
    copy = tmp_path / SHIM.name
    shutil.copy(SHIM, copy)
    with open(copy, "r+b") as f:
        e = ELFFile(f)
        with _mmap.mmap(f.fileno(), 0) as mm:
            vaddr = elf.find_symbols(e, mm, (C.CONTRACT_VERSION_SYMBOL,))[C.CONTRACT_VERSION_SYMBOL]
            off = elf.vaddr_to_offset(elf.load_segments(e), vaddr)
            assert int.from_bytes(mm[off : off + 4], "little") == C.CONTRACT_VERSION
            mm[off : off + 4] = (C.CONTRACT_VERSION + 1).to_bytes(4, "little")
    with pytest.raises(BpfError) as err:
        read_shim(str(copy))
    msg = str(err.value)
    assert f"version {C.CONTRACT_VERSION + 1}" in msg and "install the shim" in msg
    assert "\n" not in msg
