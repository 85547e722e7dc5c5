"""Kernel names from hostile probe arguments (agent/gpu_agent/probes/names.py): any local
process can fire the shim's kernel_name probe, so names are checked against their
ids, chunks must sit where the shim puts them, and memory is bounded in bytes."""

from __future__ import annotations

from gpu_agent.probes import contract as C
from gpu_agent.probes import names as N


def feed(kn: N.KernelNames, kernel_id: int, name: bytes, order=None) -> None:
    offs = list(range(0, len(name), C.NAME_CHUNK))
    for off in order(offs) if order else offs:
        kn.chunk(kernel_id, len(name), off, len(name[off : off + C.NAME_CHUNK]), name[off : off + C.NAME_CHUNK])


def test_a_name_is_kept_only_under_its_own_id():
    kn = N.KernelNames({})
    victim = b"_Z6victimPf"
    feed(kn, C.kernel_id(victim), b"_Z8attackerPf")  # another process's kernel id
    assert C.kernel_id(victim) not in kn and kn.counts["drop_name_spoofed"] == 1
    feed(kn, C.kernel_id(victim), victim)
    assert kn[C.kernel_id(victim)] == victim


def test_chunks_out_of_order_assemble_once_and_odd_chunks_are_refused():
    kn = N.KernelNames({})
    name = b"_Z" + b"q" * 5000  # 10 chunks
    feed(kn, C.kernel_id(name), name, order=lambda offs: offs[::-1])
    assert kn[C.kernel_id(name)] == name and kn.counts["names_complete"] == 1
    other = b"_Z" + b"r" * 1000
    kn.chunk(C.kernel_id(other), len(other), 100, 512, other[100:612])  # off the chunk grid
    kn.chunk(C.kernel_id(other), len(other), 0, 100, other[:100])  # a short middle chunk
    assert kn.counts["ev_corrupt"] == 2 and kn.pending == 0


def test_names_that_never_finish_stay_within_their_byte_bound():
    kn = N.KernelNames({})
    for i in range(20000):  # the first chunk of a 64 KiB name each, never the rest
        kn.chunk(1000 + i, C.MAX_NAME_LEN, 0, C.NAME_CHUNK, b"z" * C.NAME_CHUNK)
    assert kn._pending_bytes <= N.MAX_PENDING_BYTES and kn.pending <= N.MAX_PENDING_NAMES
    assert kn.counts["drop_pending_names_evicted"] == 20000 - kn.pending
    # a real name still gets through afterwards
    feed(kn, C.kernel_id(b"_Z4realv"), b"_Z4realv")
    assert kn[C.kernel_id(b"_Z4realv")] == b"_Z4realv"


def test_finished_names_are_bounded_in_bytes_oldest_first(monkeypatch):
    monkeypatch.setattr(N, "MAX_NAME_BYTES", 64 * 1024)
    kn = N.KernelNames({})
    made = [b"_Z%05d" % i + b"k" * 1000 for i in range(200)]  # 200 KB of names
    for i, name in enumerate(made):
        feed(kn, C.kernel_id(name), name)
        if i % 10 == 9:  # drains go by, and no record uses them
            kn.drained([])
    assert kn._bytes <= 64 * 1024 and kn.counts["drop_names_evicted"] == 200 - len(kn)
    assert C.kernel_id(made[-1]) in kn and C.kernel_id(made[0]) not in kn


def test_a_name_in_use_is_never_pushed_out_a_new_one_is_refused_instead(monkeypatch):
    """A flood past the bound while the agent is too busy to drain: the name that the
    last drain used stays, and the flood's newest names are refused (counted); once
    two drain periods pass without its use, it goes first."""
    monkeypatch.setattr(N, "MAX_NAME_BYTES", 64 * 1024)
    kn = N.KernelNames({})
    used = b"_Z4usedv" + b"u" * 1000
    feed(kn, C.kernel_id(used), used)
    kn.drained([C.kernel_id(used)])
    flood = [b"_Z%05d" % i + b"k" * 1000 for i in range(200)]
    for name in flood:
        feed(kn, C.kernel_id(name), name)
    assert C.kernel_id(used) in kn and kn._bytes <= 64 * 1024
    assert kn.counts["drop_names_evicted"] == 201 - len(kn)
    assert C.kernel_id(flood[0]) in kn and C.kernel_id(flood[-1]) not in kn
    kn.drained([])
    kn.drained([])
    feed(kn, C.kernel_id(flood[-1]), flood[-1])
    assert C.kernel_id(used) not in kn and C.kernel_id(flood[-1]) in kn
