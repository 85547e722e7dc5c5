"""gpu_agent.system.elf and gpu_agent.system.procfs against a real shared library loaded into
this process: symbol addresses, the PT_LOAD translations and the load bias must
give the address the dynamic loader gave the function."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess

from elftools.elf.elffile import ELFFile

from gpu_agent.system import elf, procfs


def _build(tmp_path):
    src = tmp_path / "lib.c"
    src.write_text(
        "int ga_elf_probe_fn(int x) { return x * 3 + 1; }\n"
        "static int pad[4096] = {1};\n"
        "int ga_elf_second(int x) { return pad[x & 4095] + x; }\n"
    )
    so = tmp_path / "libgaelf.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def test_symbols_translations_and_load_bias_match_the_loader(tmp_path):
    so = _build(tmp_path)
    with open(so, "rb") as f:
        e = ELFFile(f)
        segs = elf.load_segments(e)
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            syms = elf.find_symbols(e, mm, ("ga_elf_probe_fn", "ga_elf_second", "absent"))
            funcs = elf.function_symbols(e, ".symtab", mm)
            assert funcs is not None and len(funcs[0]) >= 2
        assert elf.build_id(e)  # gcc on Debian links with --build-id
    assert set(syms) == {"ga_elf_probe_fn", "ga_elf_second"}
    for vaddr in syms.values():
        assert elf.offset_to_vaddr(segs, elf.vaddr_to_offset(segs, vaddr)) == vaddr

    lib = ctypes.CDLL(str(so))
    real = ctypes.cast(lib.ga_elf_probe_fn, ctypes.c_void_p).value
    maps = [m for m in procfs.read_maps(os.getpid()) if m.path == str(so)]
    assert maps, "the library is not in /proc/self/maps"
    bias = elf.load_bias(segs, [(m.start, m.offset) for m in maps])
    assert bias is not None and syms["ga_elf_probe_fn"] + bias == real
