"""C++ (Itanium ABI) names made readable: CUDA kernel names and native frames.

cxxfilt (libstdc++'s __cxa_demangle) first; libiberty's cplus_demangle_v3 (from
binutils' libbfd) for the deep template names it refuses. Never raises, never
truncates: a name that cannot be demangled comes back as it was."""

from __future__ import annotations

import functools
import os
from typing import Optional, Union

import cxxfilt

_bfd_state = {"fn": None, "free": None, "tried": False}
_DMGL_PARAMS_ANSI = 1 | 2
_DMGL_NO_RECURSE_LIMIT = 1 << 18


def _bfd_demangler():
    """libiberty's cplus_demangle_v3 (exported by binutils' libbfd), or None.

    libstdc++'s __cxa_demangle (what cxxfilt calls) refuses names whose
    demangle tree is deeper than libiberty's recursion limit (1024): e.g. a
    template argument pack of ~90 types.  cplus_demangle_v3 accepts
    DMGL_NO_RECURSE_LIMIT (like ``c++filt -r``).
    """
    if _bfd_state["tried"]:
        return _bfd_state["fn"]
    _bfd_state["tried"] = True
    import ctypes
    import ctypes.util
    import glob

    names = []
    found = ctypes.util.find_library("bfd")
    if found:
        names.append(found)
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        names.extend(sorted(glob.glob(os.path.join(d, "libbfd*.so*"))))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.cplus_demangle_v3
            libc = ctypes.CDLL(None)
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
        free = libc.free
        free.argtypes = [ctypes.c_void_p]
        free.restype = None

        def call(raw: bytes, fn=fn, free=free) -> Optional[bytes]:
            p = fn(raw, _DMGL_PARAMS_ANSI | _DMGL_NO_RECURSE_LIMIT)
            if not p:
                return None
            try:
                return ctypes.string_at(p)
            finally:
                free(p)

        _bfd_state["fn"] = call
        return call
    return None


@functools.lru_cache(maxsize=16384)
def _demangle_raw(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    if not raw.startswith(b"_Z"):
        return text
    try:
        return cxxfilt.demangleb(raw, external_only=True).decode("utf-8", "replace")
    except Exception:  # InvalidName, InternalError, LibraryNotFound...
        pass
    try:
        fn = _bfd_demangler()
        out = fn(raw) if fn is not None else None
    except Exception:
        out = None
    return out.decode("utf-8", "replace") if out else text


def demangle(name: Union[str, bytes]) -> str:
    """Demangle a C++ (Itanium ABI) name; anything else comes back unchanged.

    Never raises and never truncates: failures return the raw name.  A NUL
    and anything after it is dropped.
    """
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogateescape")
    else:
        raw = bytes(name)
    return _demangle_raw(raw.split(b"\0", 1)[0])


def demangle_kernel(name: Union[bytes, str]) -> str:
    """Full demangled CUDA kernel name (never truncated; raw name on failure).

    Kernel names arrive as mangled C++ (``_Z...``) or plain C strings, possibly
    longer than 5000 bytes; a trailing NUL and anything after it is dropped.
    """
    return demangle(name)
