"""Runs a command under a seccomp filter that refuses process_vm_readv with EPERM, as
Docker's default profile does for a container without CAP_SYS_PTRACE:
`python no_vm_readv.py PROGRAM ARGS...` (x86-64)."""

from __future__ import annotations

import ctypes
import os
import sys

NR_PROCESS_VM_READV = 310  # x86-64
AUDIT_ARCH_X86_64 = 0xC000003E
EPERM = 1


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def refuse_process_vm_readv() -> None:
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, errno_ = 0x7FFF0000, 0x00050000 | EPERM
    prog = [
        SockFilter(ld, 0, 0, 4),  # seccomp_data.arch
        SockFilter(jeq, 1, 0, AUDIT_ARCH_X86_64),
        SockFilter(ret, 0, 0, allow),  # another arch: not ours to judge
        SockFilter(ld, 0, 0, 0),  # seccomp_data.nr
        SockFilter(jeq, 0, 1, NR_PROCESS_VM_READV),
        SockFilter(ret, 0, 0, errno_),
        SockFilter(ret, 0, 0, allow),
    ]
    arr = (SockFilter * len(prog))(*prog)
    fprog = SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(SockFilter)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


if __name__ == "__main__":
    refuse_process_vm_readv()
    os.execvp(sys.argv[1], sys.argv[1:])
