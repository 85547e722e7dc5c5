"""The Python walker's maps (bpf/python_stack.h) of a BpfSession: which processes
the walker reads (py_procs: each one's interpreter layout, symbols/python/layout.py)
and the Python frames it stored with a launch's stack (py_stacks)."""

from __future__ import annotations

import ctypes as ct
import os
from typing import Optional

from . import contract as C
from .shim_attach import BpfError


class PythonMaps:
    """Mixed into BpfSession, whose open BPF object (_bpf), libbpf (_lib) and
    maps (_maps) it uses."""

    def set_py_config(self, tgid: int, cfg: C.PyConfig) -> None:
        """Turn on Python stacks for tgid (its interpreter's layout, see python/layout.py)."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = ct.c_uint32(tgid)
        if self._lib.bpf_update_elem(self._maps["py_procs"].map_fd, ct.byref(key), ct.byref(cfg), 0) != 0:
            raise BpfError(f"py_procs update for {tgid} failed: {os.strerror(ct.get_errno())}")

    def del_py_config(self, tgid: int) -> None:
        if self._bpf is None:
            return
        key = ct.c_uint32(tgid)
        self._lib.bpf_delete_elem(self._maps["py_procs"].map_fd, ct.byref(key))

    def get_py_stack(self, tgid: int, stack_id: int, start: int) -> Optional[C.PyStack]:
        """Python frames stored with a stack (innermost first); None if it has none."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = C.StackKey(tgid=tgid, start=start, stack_id=stack_id)
        val = C.PyStack()
        if self._lib.bpf_lookup_elem(self._maps["py_stacks"].map_fd, ct.byref(key), ct.byref(val)) != 0:
            return None
        return val
