"""Names the agent reads itself (issue 30): parcagpu names in pages BPF cannot read
are read by the root agent from /proc/PID/mem (agent/gpu_agent/probes/cold_names.py).
uid 65534 maps a parcagpu-shaped library and hands over 5 000 names from pages it
never touched, and two addresses nothing maps: every request is read or refused
and counted, and the agent stays under its memory bound. (tests/test_parcagpu.py:
an honest workload's cold names are all read.)"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections import Counter

from support.agent import Agent
from support.env import mock_env, need_ebpf, private_shim

from .attacker import as_nobody
from .faultkit import RSS_BOUND_MIB
from .test_parcagpu_sites import build

PAGES = 5000
FLOOD_C = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <unistd.h>

extern unsigned short parcagpu_kernel_executed_semaphore; /* pglike.c's (hidden) */
int pg_cold_ready(void) { return parcagpu_kernel_executed_semaphore; }

/* kernel_executed with names BPF cannot read: one per page of a file mapping this
 * process never touches, then two addresses nothing maps. */
int pg_cold_flood(int pages)
{
    char path[] = "/tmp/pgcold-XXXXXX", name[64];
    int fd = mkstemp(path);
    unlink(path);
    for (int i = 0; i < pages; i++) {
        int n = snprintf(name, sizeof name, "_Z9cold_%dv", i) + 1;
        if (pwrite(fd, name, n, (off_t)i * 4096) != n)
            return -1;
    }
    char *base = mmap(NULL, (size_t)pages * 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return -1;
    uint64_t start = 1000, end = 2000, node = 0;
    uint32_t corr = 1, dev = 0, strm = 7, graph = 0;
    for (int i = 0; i < pages + 2; i++) {
        const char *at = i < pages ? base + (size_t)i * 4096 : (const char *)(uintptr_t)(i == pages ? 0x10 : 0x7ffffffff000ull);
        STAP_PROBE8(parcagpu, kernel_executed, start, end, corr, dev, strm, graph, node, at);
        if (i % 256 == 255)
            usleep(2000);
    }
    return 0;
}
"""


def test_names_a_process_hands_over_cold_are_bounded_and_counted(tmp_path, world_dir, built):
    need_ebpf()
    src = world_dir / "cold_flood.c"
    src.write_text(FLOOD_C)
    hostile = build(world_dir / "libcold_cupti_client.so", src)
    os.chown(hostile, 65534, 65534)
    agent = Agent(
        tmp_path / "profiles",
        "--shim",
        private_shim(tmp_path / "shim"),
        "--discover-interval",
        "0.2s",
        "--metrics-addr",
        "127.0.0.1:0",
    )
    metrics = re.search(r"metrics on (http://\S+/metrics)", agent.watching_line).group(1)
    attacker = subprocess.Popen(
        [
            "/usr/bin/python3",
            "-c",
            "import ctypes, sys, time\n"
            "lib = ctypes.CDLL(sys.argv[1])\n"
            "print('up', flush=True)\n"
            "end = time.time() + 30\n"
            "while not lib.pg_cold_ready() and time.time() < end: time.sleep(0.05)\n"
            "print('flood', lib.pg_cold_flood(int(sys.argv[2])), flush=True)\n"
            "time.sleep(3)\n",
            str(hostile),
            str(PAGES),
        ],
        env=mock_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_nobody,
    )
    try:
        assert attacker.stdout.readline().strip() == "up", attacker.stderr.read()
        agent.wait_for_line(f"also watching parcagpu library {hostile}")
        out, err = attacker.communicate(timeout=60)
        assert "flood 0" in out, (out, err)
        time.sleep(2.0)
        text = urllib.request.urlopen(metrics, timeout=10).read().decode()
        drops = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'^gpu_agent_drops_total\{reason="(\w+)"\}\s+(\S+)$', text, re.M)
        }
        hwm = int(re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{agent.proc.pid}/status").read()).group(1)) / 1024
        assert hwm < RSS_BOUND_MIB, hwm
        agent.stop()
        names = Counter(s.frames[0] for s in agent.samples() if s.labels.get("pid") == str(attacker.pid))
        named = sum(1 for k in names if k.startswith("_Z9cold_") or k.startswith("cold_"))
        refused = int(drops.get("agent_cold_name", 0))
        lost_events = int(drops.get("ringbuf_full", 0))
        # every request read (its kernel named) or refused, counted; the 2 wild ones refused
        assert refused >= 2 and named + refused + lost_events == PAGES + 2, (named, refused, lost_events)
    finally:
        if attacker.poll() is None:
            attacker.kill()
        agent.kill()
