"""The CPython interpreters on this machine that the Python-stack tests run: every
supported one (3.10 and newer, with the GIL), and the newest too-old one, which
shows the degradation. Probed once, at import."""

from __future__ import annotations

import glob
import os
import re
import subprocess
from pathlib import Path

_PROBE = (
    "import sys, sysconfig, ctypes; print(sys.implementation.name, sys.version_info[0], "
    "sys.version_info[1], sysconfig.get_config_var('Py_GIL_DISABLED') or 0)"
)


def _candidates() -> list[str]:
    pats = [
        os.path.expanduser("~/.pyenv/versions/*/bin/python3"),
        "/root/.pyenv/versions/*/bin/python3",
        "/usr/bin/python3.[0-9]*",
        "/usr/local/bin/python3.[0-9]*",
        "/opt/python*/bin/python3",
    ]
    out, seen = [], set()
    for pat in pats:
        for p in sorted(glob.glob(pat)):
            if not re.search(r"python3(\.\d+)?$", p) or not os.access(p, os.X_OK):
                continue
            real = os.path.realpath(p)
            if real in seen:
                continue
            seen.add(real)
            out.append(p)
    return out


def _interpreters() -> tuple[list, list]:
    """(supported, too_old): [(id, path, (major, minor), static)]"""
    good, old = [], []
    for p in _candidates():
        try:
            r = subprocess.run([p, "-c", _PROBE], capture_output=True, text=True, timeout=20)
            impl, major, minor, nogil = r.stdout.split()
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        if impl != "cpython" or nogil not in ("0", "None"):
            continue
        ver = (int(major), int(minor))
        # Static: the interpreter is in the executable (Debian's /usr/bin/python3).
        ldd = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
        static = "libpython" not in ldd
        ident = f"{ver[0]}.{ver[1]}" + ("-static" if static else "") + f"-{Path(p).parts[-3]}"
        (good if ver >= (3, 10) else old).append((ident, p, ver, static))
    # One interpreter too old is enough to show the degradation (the newest one).
    return good, sorted(old, key=lambda o: o[2])[-1:]


SUPPORTED, TOO_OLD = _interpreters()
