"""Walking and draining BPF maps through libbpf's syscall wrappers (ctypes):
what bpf_session.py reads its maps with.

A drain reads and deletes every entry of a per-CPU map, each entry handed to
add(key, values as u64s, all CPUs' values in a row) exactly once: in batches
(BPF_MAP_LOOKUP_AND_DELETE_BATCH) where the kernel has them, else key by key."""

from __future__ import annotations

import ctypes as ct
import errno
import os

from .shim_attach import BpfError

BATCH_CHUNK = 1024  # keys per BPF_MAP_LOOKUP_AND_DELETE_BATCH call


class BatchUnsupported(Exception):
    """The kernel has no batch operations for this map: drain_per_key instead."""


def keys(lib, fd: int, ktype) -> list:
    """Every key of the map (ctypes type ktype): a whole walk, not for a hot path."""
    key, nxt, out = ktype(), ktype(), []
    if lib.bpf_get_first_key(fd, ct.byref(key), ct.sizeof(key)) == 0:
        out.append(ktype.from_buffer_copy(key))
        while lib.bpf_get_next_key(fd, ct.byref(key), ct.byref(nxt)) == 0:
            out.append(ktype.from_buffer_copy(nxt))
            ct.memmove(ct.byref(key), ct.byref(nxt), ct.sizeof(key))
    return out


def drain_batch(lib, fd: int, stride: int, add, key_type) -> None:
    chunk = BATCH_CHUNK
    keys_buf = (key_type * chunk)()
    vals = (ct.c_uint64 * (stride * chunk))()
    in_batch, out_batch = ct.c_uint32(0), ct.c_uint32(0)
    count = ct.c_uint32(0)
    first = True
    while True:
        count.value = chunk
        res = lib.bpf_lookup_and_delete_batch(
            fd,
            None if first else ct.byref(in_batch),
            ct.byref(out_batch),
            ct.byref(keys_buf),
            ct.byref(vals),
            ct.byref(count),
        )
        err = ct.get_errno() if res != 0 else 0
        mv = memoryview(vals).cast("B").cast("Q")
        for i in range(count.value):
            add(keys_buf[i], mv[i * stride : (i + 1) * stride])
        if res != 0:
            if err == errno.ENOENT:
                return  # walked every bucket
            if err == errno.ENOSPC and count.value == 0:
                # One bucket holds more keys than the buffer: grow and retry.
                chunk *= 2
                keys_buf = (key_type * chunk)()
                vals = (ct.c_uint64 * (stride * chunk))()
                continue
            if first and err in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise BatchUnsupported()
            raise BpfError(f"BPF_MAP_LOOKUP_AND_DELETE_BATCH failed: {os.strerror(err)}")
        in_batch.value = out_batch.value
        first = False


def drain_per_key(lib, fd: int, stride: int, add, key_type) -> None:
    """Kernels without batch ops: per-key lookup-and-delete (5.14+), else lookup+delete."""
    vals = (ct.c_uint64 * stride)()
    for k in keys(lib, fd, key_type):
        if lib.bpf_lookup_and_delete(fd, ct.byref(k), ct.byref(vals)) != 0:
            if ct.get_errno() == errno.ENOENT:
                continue
            # Old kernel: not atomic, an increment between the two calls is lost.
            if lib.bpf_lookup_elem(fd, ct.byref(k), ct.byref(vals)) != 0:
                continue
            lib.bpf_delete_elem(fd, ct.byref(k))
        add(k, memoryview(vals).cast("B").cast("Q"))


def drain(lib, fd: int, stride: int, add, key_type) -> None:
    """Read and delete every entry of a per-CPU map: in batches, else key by key."""
    try:
        drain_batch(lib, fd, stride, add, key_type)
    except BatchUnsupported:
        drain_per_key(lib, fd, stride, add, key_type)
