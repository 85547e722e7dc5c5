"""A process cannot steer the root agent's uprobes into a file it did not show it.

The agent attaches to shim copies it finds in /proc/PID/maps. The process that maps
such a copy controls its path: between the agent's check and its attach it can move
the copy's directory away and put, under the same name, a symlink to a library
that another (root) process maps. An attach by path would then plant breakpoints
and raise the semaphore in THAT file. The agent now opens the copy once, checks the
open file, and attaches only through it (/proc/self/fd/N).

Here the attacker wins the race every time: the test swaps the directory at the
agent's first uprobe attach. The victim is another copy of the shim under another
name (so discovery never picks it up on its own) in a process with
GPU_AGENT_DEBUG=1: if any agent ever raised its semaphore, it says "attached"."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from support.env import MOCK_APP, SHIM, mock_env, need_ebpf
from gpu_agent.probes.bpf_session import BpfSession


def _app(shim, **env):
    return subprocess.Popen(
        [str(MOCK_APP), "--paths", "cuLaunchKernel", "--duration", "30", "--sleep-ms", "5"],
        env=mock_env(CUDA_INJECTION64_PATH=str(shim), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_path_swapped_after_the_check_cannot_redirect_the_attach(tmp_path, built):
    need_ebpf()
    victim = tmp_path / "libvictim.so"
    shutil.copy(SHIM, victim)
    atk = tmp_path / "atk"
    atk.mkdir()
    shutil.copy(SHIM, atk / SHIM.name)
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / SHIM.name).symlink_to(victim)

    s = BpfSession(str(SHIM))
    s.open()
    procs = []
    try:
        victim_app = _app(victim, GPU_AGENT_DEBUG="1")
        attacker_app = _app(atk / SHIM.name)
        procs = [victim_app, attacker_app]
        time.sleep(1.0)  # both have mapped their copies

        real_attach, swapped = s.attachments.attach, []
        atk_ino = os.stat(atk / SHIM.name).st_ino
        # (discover() sees the whole node: in a parallel run, other tests' processes map
        # shim copies and parcagpu libraries of their own. The race is run at this test's
        # copy only, which the agent names through its open file, /proc/self/fd/N.)

        def attach_after_the_swap(fn, path, offset, ref):
            if not swapped and os.stat(path).st_ino == atk_ino:  # after the check, before the attach
                os.rename(atk, tmp_path / "atk-away")
                os.rename(evil, atk)
                swapped.append(path)
            return real_attach(fn, path, offset, ref)

        s.attachments.attach = attach_after_the_swap
        found = s.discover()
        assert swapped, "the race was never run"
        time.sleep(1.0)  # a victim shim whose semaphore rose attaches within its 100 ms poll
    finally:
        s.close()
        for p in procs:
            p.kill()
        victim_err = procs[0].communicate()[1] if procs else ""
        for p in procs[1:]:
            p.wait()
    assert "attached (pid" not in victim_err, victim_err
    # The copy the attacker really showed was attached, through the open file.
    assert [f.path for f in found if f.path.startswith(str(tmp_path))] == [str(atk / SHIM.name)], found
