"""Build the probe firer and write scripts for it (format: see main.c)."""

from __future__ import annotations

import ctypes as ct
import os
import struct
import subprocess
from pathlib import Path

from gpu_agent.probes import contract as C

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LIB_NAME = "libgpu_agent_probe_firer.so"


def build(outdir: Path) -> tuple[Path, Path]:
    """Compile the probe library and the driver; returns (lib, exe)."""
    outdir.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "gcc")
    # The vendored sys/sdt.h (shim/third_party), like the shim: fresh machines lack systemtap-sdt-dev.
    inc = ["-I", str(REPO / "shim" / "include"), "-I", str(REPO / "shim" / "third_party"), "-I", str(HERE)]
    flags = ["-O2", "-g", "-Wall", "-Wno-comment"]
    lib = outdir / LIB_NAME
    exe = outdir / "probe_firer"
    subprocess.run(
        [cc, *flags, "-fPIC", "-shared", *inc, "-o", str(lib), str(HERE / "probes.c"), str(HERE / "attach.c")],
        check=True,
    )
    subprocess.run(
        [
            cc,
            *flags,
            *inc,
            "-o",
            str(exe),
            str(HERE / "main.c"),
            "-L",
            str(outdir),
            "-lgpu_agent_probe_firer",
            "-Wl,-rpath,$ORIGIN",
        ],
        check=True,
    )
    return lib, exe


def _pad8(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 8)


class Script:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def corr(
        self,
        corr: int,
        cbid: int,
        stack_id: int,
        frames: list[int],
        weight: int,
        alt: bool = False,
        nframes: int | None = None,
        launch_ns: int = 0,
    ) -> "Script":
        n = len(frames) if nframes is None else nframes
        self.parts.append(struct.pack("<QIIQIIIIQ", 1, corr, cbid, stack_id, n, weight, int(alt), 0, launch_ns))
        self.parts.append(struct.pack(f"<{len(frames)}Q", *frames))
        return self

    def batch(
        self, recs: list[C.KernelRecord], dropped: int = 0, *, count: int | None = None, record_size: int | None = None
    ) -> "Script":
        arr = (C.KernelRecord * max(len(recs), 1))(*recs)
        data = bytes(arr)[: ct.sizeof(C.KernelRecord) * len(recs)]
        cnt = len(recs) if count is None else count
        rs = ct.sizeof(C.KernelRecord) if record_size is None else record_size
        self.parts.append(struct.pack("<QIIII", 2, cnt, rs, dropped, len(data)))
        self.parts.append(_pad8(data))
        return self

    def name(self, kernel_id: int, total: int, offset: int, chunk: bytes) -> "Script":
        self.parts.append(struct.pack("<QQIIII", 3, kernel_id, total, offset, len(chunk), 0))
        self.parts.append(_pad8(chunk))
        return self

    def full_name(self, kernel_id: int, name: bytes) -> "Script":
        for off in range(0, len(name), C.NAME_CHUNK):
            self.name(kernel_id, len(name), off, name[off : off + C.NAME_CHUNK])
        return self

    def node_stack(self, node_id: int, stack_id: int, frames: list[int]) -> "Script":
        self.parts.append(struct.pack("<QQQII", 6, node_id, stack_id, len(frames), 0))
        self.parts.append(struct.pack(f"<{len(frames)}Q", *frames))
        return self

    def node_cloned(self, orig: int, node_id: int) -> "Script":
        self.parts.append(struct.pack("<QQQ", 7, orig, node_id))
        return self

    def node_destroyed(self, node_id: int) -> "Script":
        self.parts.append(struct.pack("<QQ", 8, node_id))
        return self

    def pc_batch(self, recs: list[C.PcRecord], dropped: int = 0, *, count: int | None = None) -> "Script":
        data = b"".join(bytes(r) for r in recs)
        self.parts.append(struct.pack("<QIIII", 9, len(recs) if count is None else count, dropped, len(data), 0))
        self.parts.append(_pad8(data))
        return self

    def stall_reason(self, index: int, name: bytes) -> "Script":
        self.parts.append(struct.pack("<QII", 10, index, len(name) + 1))
        self.parts.append(_pad8(name + b"\0"))
        return self

    def cubin(self, crc: int, data: bytes) -> "Script":
        self.parts.append(struct.pack("<QQQ", 11, crc, len(data)))
        self.parts.append(_pad8(data))
        return self

    def attach(self) -> "Script":
        self.parts.append(struct.pack("<Q", 4))
        return self

    def wait(self) -> "Script":
        self.parts.append(struct.pack("<Q", 5))
        return self

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(self.parts))
        return path


def rec(
    kernel_id: int,
    corr: int,
    ns: int,
    *,
    start: int = 1_000_000,
    device: int = 0,
    stream: int = 7,
    graph_id: int = 0,
    node: int = 0,
    weight: int = 0,
    join_max_lag_us: int = 0,
) -> C.KernelRecord:
    """weight: the record's window weight (0, as an older shim sends, counts as 1)."""
    return C.KernelRecord(
        start_ns=start,
        end_ns=start + ns,
        kernel_id=kernel_id,
        graph_node_id=node,
        correlation_id=corr,
        device_id=device,
        context_id=1,
        stream_id=stream,
        graph_id=graph_id,
        flags=C.REC_GRAPH if graph_id else 0,
        weight=weight,
        join_max_lag_us=join_max_lag_us,
    )
