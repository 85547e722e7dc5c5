"""Line info of a cubin: (function, pc offset) -> CUDA source file and line.

Read with pyelftools, from the cubin's DWARF `.debug_line` (what `nvcc -lineinfo`
or `-G` writes), not with nvdisasm: the agent runs on nodes whose containers
carry no CUDA toolkit, and pyelftools is already its ELF reader. A cubin has no
`.debug_info` with -lineinfo, so the line programs are read directly; and each
sequence's start address (DW_LNE_set_address) is left unrelocated: its relocation
(`.rela.debug_line`) names the kernel's symbol, so the addresses come out relative
to the function's start, which is what CUPTI's pcOffset is. On an H100 this
attributed every sample to the line cuptiGetSassToSourceCorrelation gave
(docs/benchmarks.md), and tests/data/pcsampling holds that H100 cubin with
nvdisasm's listing of it, which tests/test_pcsampling.py checks this against.
"""

from __future__ import annotations

import bisect
import io
import logging
import os
import posixpath
import subprocess
import sys
from typing import Optional

log = logging.getLogger(__name__)

# (pc offset, file, line) rows of one function, sorted by pc
Rows = list[tuple[int, str, int]]


class LineTable:
    """One cubin's rows per function (mangled name)."""

    def __init__(self, functions: dict[str, Rows]):
        self.functions = functions
        self._pcs = {fn: [r[0] for r in rows] for fn, rows in functions.items()}

    def __bool__(self) -> bool:
        return bool(self.functions)

    def lookup(self, function: str, pc: int) -> Optional[tuple[str, int]]:
        """The (file, line) of the instruction at pc in function; None if unknown."""
        pcs = self._pcs.get(function)
        if not pcs:
            return None
        i = bisect.bisect_right(pcs, pc) - 1
        if i < 0:
            return None
        _, path, line = self.functions[function][i]
        return (path, line) if line else None


def read_line_table(data: bytes) -> LineTable:
    """The line table of a cubin's bytes; empty when it has none (or is no ELF)."""
    try:
        return LineTable(_parse(data))
    except Exception as e:  # a cubin we cannot read: samples keep pc offsets only
        log.debug("cubin line table unreadable: %s", e)
        return LineTable({})


# The child that parses one cubin (parse_bounded): its limits.
CHILD_AS_BYTES = 1 << 30  # address space: a decompression bomb stops here
CHILD_CPU_S = 10  # CPU seconds
CHILD_WALL_S = 20.0  # wall clock, then killed
MAX_ROWS = 1_000_000  # rows it may hand back
NOBODY = 65534


def parse_bounded(data: bytes) -> tuple[LineTable, str]:
    """The line table of hostile cubin bytes, parsed by a child process (this
    module's main) under CHILD_* limits, as nobody: (table, "") or (empty table,
    why not)."""
    try:
        p = subprocess.run(
            [sys.executable, "-S", "-c", _CHILD],
            input=data,
            capture_output=True,
            timeout=CHILD_WALL_S,
            env={"PYTHONPATH": os.pathsep.join(d for d in sys.path if d)},
        )
    except subprocess.TimeoutExpired:
        return LineTable({}), f"parse ran over {CHILD_WALL_S:g} s"
    except OSError as e:
        return LineTable({}), f"parser did not start: {e}"
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()
        return LineTable({}), f"parser exited {p.returncode}: {err[-1][:200] if err else ''}"
    functions: dict[str, Rows] = {}
    files: list[str] = []
    try:
        for line in p.stdout.decode("utf-8", "replace").split("\n"):
            kind, _, rest = line.partition("\t")
            if kind == "F":  # a file name, by its index in order
                files.append(rest)
            elif kind == "R":
                fn, pc, fi, ln = rest.split("\t")
                functions.setdefault(fn, []).append((int(pc), files[int(fi)], int(ln)))
    except (ValueError, IndexError) as e:
        return LineTable({}), f"parser output unreadable: {e}"
    for rows in functions.values():
        rows.sort(key=lambda r: r[0])
    return LineTable(functions), ""


def _child_main() -> None:
    """In the child: limits first, then nobody, then the bytes on stdin."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS_BYTES, CHILD_AS_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    # what parsing imports, before nobody loses the right to read it
    import elftools.dwarf.constants  # noqa: F401
    import elftools.dwarf.dwarfinfo  # noqa: F401
    import elftools.dwarf.lineprogram  # noqa: F401
    import elftools.elf.elffile  # noqa: F401
    import elftools.elf.relocation  # noqa: F401
    import elftools.elf.sections  # noqa: F401
    import zlib  # noqa: F401

    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    data = sys.stdin.buffer.read()
    out, files, n = [], {}, 0

    def clean(s: str) -> str:  # names from the cubin: no separator of ours in them
        return s.replace("\t", " ").replace("\n", " ").replace("\r", " ")

    for fn, rows in _parse(data).items():
        fn = clean(fn)
        for pc, path, line in rows:
            path = clean(path)
            if n >= MAX_ROWS:
                break
            if path not in files:
                files[path] = len(files)
                out.append(f"F\t{path}")
            out.append(f"R\t{fn}\t{pc}\t{files[path]}\t{line}")
            n += 1
    sys.stdout.write("\n".join(out) + "\n")


_CHILD = (
    "import sys; sys.path[:0] = __import__('os').environ['PYTHONPATH'].split(':'); "
    f"from {__name__} import _child_main; _child_main()"
)


def _parse(data: bytes) -> dict[str, Rows]:
    from elftools.elf.elffile import ELFFile
    from elftools.dwarf.constants import DW_LNE_set_address

    elf = ELFFile(io.BytesIO(data))
    if elf.get_section_by_name(".debug_line") is None:
        return {}
    dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
    # Each DW_LNE_set_address has one relocation against its function's symbol,
    # in section order: the k-th set_address is the k-th relocation.
    targets = []
    symtab = elf.get_section_by_name(".symtab")
    for name in (".rela.debug_line", ".rel.debug_line"):
        rel = elf.get_section_by_name(name)
        if rel is not None and symtab is not None:
            for r in rel.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                targets.append((r["r_offset"], sym.name, r.entry.get("r_addend", 0)))
    targets.sort()
    out: dict[str, Rows] = {}
    offset, end, k = 0, dwarf.debug_line_sec.size, 0
    while offset < end:
        prog = dwarf._parse_line_program_at_offset(offset, dwarf.structs)
        files = _file_names(prog)
        function, base, addend = None, 0, 0
        for entry in prog.get_entries():
            if entry.is_extended and entry.command == DW_LNE_set_address:
                base = entry.args[0]
                function, addend = (targets[k][1], targets[k][2]) if k < len(targets) else (None, 0)
                k += 1
            st = entry.state
            if st is None or st.end_sequence or function is None:
                continue
            out.setdefault(function, []).append((st.address - base + addend, files.get(st.file, ""), st.line))
        offset = prog.program_end_offset
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out


def _file_names(prog) -> dict[int, str]:
    """DWARF 2-4 file indices (1-based) -> paths with their include directory."""
    dirs = [d.decode("utf-8", "replace") if isinstance(d, bytes) else d for d in prog["include_directory"]]
    names = {}
    for i, fe in enumerate(prog["file_entry"], start=1):
        name = fe.name.decode("utf-8", "replace") if isinstance(fe.name, bytes) else fe.name
        if fe.dir_index and fe.dir_index <= len(dirs) and not name.startswith("/"):
            name = posixpath.join(dirs[fe.dir_index - 1], name)
        names[i] = name
    return names
