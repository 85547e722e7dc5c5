"""Plays "the agent" for tests/test_shim_unit.py (run with /usr/bin/python3, as root).

Attaches a uprobe to the shim's gpu_agent:attach probe with ref_ctr_offset =
the semaphore's file offset (libbcc's bpf_attach_uprobe, 7-argument form), so
the kernel raises gpu_agent_attach_semaphore in every process mapping the shim,
and counts the other probes path-wide through bcc's USDT argument readers.
Prints READY, runs until stdin closes (or --seconds), detaches the semaphore
first, waits --linger seconds, then prints one JSON line of counters.
The first sampled stack's frames are reported too (for the eh_frame check)."""

import argparse
import ctypes as ct
import json
import os
import re
import select
import subprocess
import sys
import time

from bcc import BPF, USDT

ap = argparse.ArgumentParser()
ap.add_argument("shim")
ap.add_argument("--seconds", type=float, default=0)
ap.add_argument("--linger", type=float, default=0.3)
args = ap.parse_args()


def probes(path):
    loads = []
    for line in subprocess.run(
        ["readelf", "-lW", path], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            loads.append((int(f[2], 16), int(f[1], 16), int(f[4], 16)))
    notes = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True).stdout

    def off(v):
        for pv, po, fs in loads:
            if pv <= v < pv + fs:
                return v - pv + po
        raise ValueError(hex(v))

    out = {}
    for m in re.finditer(
        r"Name: (\w+)\n\s+Location: (0x[0-9a-f]+), Base: 0x[0-9a-f]+, "
        r"Semaphore: (0x[0-9a-f]+)",
        notes,
    ):
        sem = int(m.group(3), 16)
        out[m.group(1)] = (off(int(m.group(2), 16)), off(sem) if sem else 0)
    return out


TEXT = r"""
#include <uapi/linux/ptrace.h>
#include "gpu_agent_probes.h"
BPF_ARRAY(cnt, u64, 16);
BPF_ARRAY(first, u64, 16);
static void add(int i, u64 v) { u64 *p = cnt.lookup(&i); if (p) __sync_fetch_and_add(p, v); }
int on_batch(struct pt_regs *ctx) {
    u32 n = 0, rs = 0, d = 0;
    bpf_usdt_readarg(2, ctx, &n); bpf_usdt_readarg(3, ctx, &rs); bpf_usdt_readarg(4, ctx, &d);
    add(0, 1); add(1, n); add(2, d); if (rs != sizeof(struct ga_kernel_record)) add(9, 1);
    return 0;
}
int on_corr(struct pt_regs *ctx) {
    u32 w = 0, nf = 0; u64 sid = 0, fp = 0;
    bpf_usdt_readarg(3, ctx, &sid); bpf_usdt_readarg(4, ctx, &fp);
    bpf_usdt_readarg(5, ctx, &nf); bpf_usdt_readarg(6, ctx, &w);
    add(3, 1); add(4, w); add(5, nf); if (!sid) add(10, 1);
    int z = 0; u64 *got = cnt.lookup(&z);
    int k = 11; u64 *f = cnt.lookup(&k);
    if (f && *f == 0 && fp) {
        __sync_fetch_and_add(f, 1);
        for (int i = 0; i < 16; i++) {
            u64 ip = 0; int j = i;
            if (i < nf) bpf_probe_read_user(&ip, sizeof(ip), (void *)(fp + 8 * i));
            first.update(&j, &ip);
        }
    }
    return 0;
}
int on_name(struct pt_regs *ctx) { u32 len = 0; bpf_usdt_readarg(5, ctx, &len); add(6, 1); add(7, len); return 0; }
int on_attach(struct pt_regs *ctx) { add(8, 1); return 0; }
"""

P = probes(args.shim)
u = USDT(path=args.shim)
u.enable_probe("kernel_batch", "on_batch")
u.enable_probe("cuda_correlation", "on_corr")
u.enable_probe("kernel_name", "on_name")
INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shim", "include")
b = BPF(text=TEXT, usdt_contexts=[u], cflags=["-DGA_BPF", f"-I{INCLUDE}", "-Wno-comment"])
lib = ct.CDLL("libbcc.so.0", use_errno=True)
attach = ct.CFUNCTYPE(
    ct.c_int, ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p, ct.c_uint64, ct.c_int, ct.c_uint32, use_errno=True
)(("bpf_attach_uprobe", lib))
fn = b.load_func("on_attach", BPF.KPROBE)
pc, sem = P["attach"]
ev = b"p_ga_shim_unit_%d" % os.getpid()
fd = attach(fn.fd, 0, ev, args.shim.encode(), pc, -1, sem)
if fd < 0:
    sys.exit(f"bpf_attach_uprobe(ref_ctr_offset={sem:#x}) failed: {os.strerror(ct.get_errno())}")
print("READY", flush=True)
if args.seconds:
    time.sleep(args.seconds)
else:
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 60)
        if r and not sys.stdin.readline():
            break
lib.bpf_detach_uprobe(ev)
os.close(fd)
time.sleep(args.linger)
names = [
    "batches",
    "records",
    "dropped",
    "samples",
    "weight_sum",
    "frames_sum",
    "name_chunks",
    "name_bytes",
    "attach_hits",
    "bad_record_size",
    "zero_stack_id",
]
out = {n: b["cnt"][ct.c_int(i)].value for i, n in enumerate(names)}
out["first_frames"] = [b["first"][ct.c_int(i)].value for i in range(16)]
print(json.dumps(out), flush=True)
