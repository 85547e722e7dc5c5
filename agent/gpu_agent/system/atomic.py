"""The files the agent writes: atomic (readers see the old file or the new one,
never a part), its own (0600 unless asked otherwise: profiles name other tenants'
kernels and pods), and never through a link someone planted at the path (a new
file is written beside it and renamed over it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Iterable, Iterator, Union


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, BinaryIO], mode: int = 0o600) -> None:
    """Write data (bytes, or a file to copy) as a new file at path (private_output), with `mode`."""
    with private_output(path) as f:
        if isinstance(data, (bytes, bytearray)):
            f.write(data)
        else:
            shutil.copyfileobj(data, f)
        os.fchmod(f.fileno(), mode)


@contextmanager
def private_output(path: Union[str, os.PathLike], text: bool = False) -> Iterator:
    """A file object for a new file at `path`, mode 0600, streamed: written beside
    `path` under a temporary name (created exclusively) and renamed over it once
    complete, so that a link planted at `path` is replaced, never followed."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def hand_to_invoker(paths: Iterable[Union[str, os.PathLike]]) -> None:
    """Under sudo, `record`'s and `trace`'s outputs go to the user who ran it
    (SUDO_UID, SUDO_GID), still 0600, so that `pprof out.pb.gz` works without root.
    The files are the ones just written; links are not followed."""
    if os.geteuid() != 0:
        return
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return
    for p in paths:
        try:
            os.chown(p, uid, gid, follow_symlinks=False)
        except OSError:
            pass
