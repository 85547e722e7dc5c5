"""The files the agent writes: atomic (readers see the old file or the new one,
never a part), its own (0600 unless asked otherwise: profiles name other tenants'
kernels and pods), and never through a link someone planted at the path (a new
file is written beside it and renamed over it)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Iterator, Optional, Union


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, BinaryIO], mode: int = 0o600) -> None:
    """Write data (bytes, or a file to copy) as a new file at path (private_output), with `mode`."""
    with private_output(path) as f:
        if isinstance(data, (bytes, bytearray)):
            f.write(data)
        else:
            shutil.copyfileobj(data, f)
        os.fchmod(f.fileno(), mode)


# Under sudo, the user outputs of `record`, `trace` and `timeline merge` are created
# as their invoker would create them (outputs_for_invoker): (uid, gid, gids) or None.
_invoker: Optional[tuple[int, int, set[int]]] = None


def outputs_for_invoker() -> None:
    """From here on, under sudo, every file written is created as sudo's invoker would
    create it: only in a directory they may write into (and reach), checked on the
    opened directory, created there without following a link, and theirs (fchown on
    the open file, 0600). Root could otherwise write, and hand to that user, any file
    root can: `-o /etc/ld.so.preload` (issue 44)."""
    global _invoker
    from .safe_open import invoker

    who = invoker()
    _invoker = (who[0], int(os.environ.get("SUDO_GID", "-1")), who[1]) if who else None


def invoker_may_not_write(path: Union[str, os.PathLike]) -> Optional[str]:
    """Why sudo's invoker may not create `path` ("" never; None: they may, or no
    invoker). The check private_output repeats on the opened directory."""
    if _invoker is None:
        return None
    try:
        dfd = os.open(os.path.dirname(os.path.abspath(os.fspath(path))) or "/", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"{path}: {e.strerror}"
    try:
        return _why_not(dfd, os.path.basename(os.fspath(path)), path)
    finally:
        os.close(dfd)


def _why_not(dfd: int, name: str, path) -> Optional[str]:
    from .safe_open import may

    uid, _, gids = _invoker
    who = (uid, gids)
    d = os.fstat(dfd)
    search = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    ok = may(d, who, (stat.S_IWUSR, stat.S_IWGRP, stat.S_IWOTH)) and may(d, who, search)
    up = os.path.dirname(os.readlink(f"/proc/self/fd/{dfd}"))
    while ok and up and up != "/":
        try:
            ok = may(os.stat(up), who, search)
        except OSError:
            ok = False
        up = os.path.dirname(up)
    if ok and d.st_mode & stat.S_ISVTX and d.st_uid != uid:  # sticky (/tmp): only one's own file
        try:
            ok = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_uid == uid
        except FileNotFoundError:
            pass
    return None if ok else f"{path}: user {uid}, who ran this through sudo, may not write there"


@contextmanager
def _invoker_output(path: str, text: bool) -> Iterator:
    """private_output as sudo's invoker: in the directory opened once and checked,
    created relative to it (no link followed), fchown'ed to the invoker."""
    uid, gid, _ = _invoker
    dfd = os.open(os.path.dirname(os.path.abspath(path)) or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        why = _why_not(dfd, os.path.basename(path), path)
        if why:
            raise PermissionError(why)
        base = os.path.basename(path)
        tmp = f".{base}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            os.fchown(fd, uid, gid)
            with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)


@contextmanager
def private_output(path: Union[str, os.PathLike], text: bool = False) -> Iterator:
    """A file object for a new file at `path`, mode 0600, streamed: written beside
    `path` under a temporary name (created exclusively) and renamed over it once
    complete, so that a link planted at `path` is replaced, never followed."""
    path = os.fspath(path)
    if _invoker is not None:
        with _invoker_output(path, text) as f:
            yield f
        return
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
