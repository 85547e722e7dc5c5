"""Read the USDT probe notes (.note.stapsdt) of an ELF file with pyelftools.

Each note gives a probe's address, its semaphore's address (0 if none) and its
argument specs ("4@%edi 8@-8(%rsp)"). Addresses in the note are link-time
virtual addresses; uprobes want FILE offsets, so both are converted through
the PT_LOAD segment that contains them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

from ..system.elf import load_segments, vaddr_to_offset

NOTE_TYPE = 3  # NT_STAPSDT


@dataclass(frozen=True)
class SdtProbe:
    provider: str
    name: str
    pc: int  # vaddr of the probe's nop (prelink-adjusted)
    semaphore: int  # vaddr of the semaphore, 0 if none
    args: tuple[str, ...]
    pc_offset: int  # file offset of pc (what a uprobe attaches to)
    semaphore_offset: int  # file offset of the semaphore (uprobe ref_ctr_offset), 0 if none


def read_probes(path: str) -> list[SdtProbe]:
    with open(path, "rb") as f:
        return probes_in(ELFFile(f), path)


def probes_in(elf: ELFFile, path: str) -> list[SdtProbe]:
    """The USDT probes of an ELF file already open (path: for messages)."""
    if elf.elfclass != 64 or not elf.little_endian:
        raise ValueError(f"{path}: only 64-bit little-endian ELF is supported")
    loads = load_segments(elf)
    base_sec = elf.get_section_by_name(".stapsdt.base")
    actual_base = base_sec["sh_addr"] if base_sec is not None else None
    notes = elf.get_section_by_name(".note.stapsdt")
    if notes is None:
        return []
    out = []
    for note in notes.iter_notes():
        # pyelftools names type 3 after the GNU note of the same number.
        if note["n_name"] != "stapsdt" or note["n_type"] not in (NOTE_TYPE, "NT_GNU_BUILD_ID", "NT_STAPSDT"):
            continue
        desc = note["n_descdata"]
        if isinstance(desc, str):  # older pyelftools decode unknown notes as latin-1
            desc = desc.encode("latin-1")
        pc, base, sem = struct.unpack_from("<QQQ", desc, 0)
        provider, name, args = desc[24:].split(b"\0")[:3]
        # Prelink may move the file after the note was written: shift by
        # how far .stapsdt.base moved (systemtap's rule).
        if actual_base is not None and base:
            delta = actual_base - base
            pc += delta
            if sem:
                sem += delta
        out.append(
            SdtProbe(
                provider=provider.decode(),
                name=name.decode(),
                pc=pc,
                semaphore=sem,
                args=tuple(args.decode().split()),
                pc_offset=vaddr_to_offset(loads, pc),
                semaphore_offset=vaddr_to_offset(loads, sem) if sem else 0,
            )
        )
    return out
