"""Opening files whose paths another (possibly hostile) local process controls.

A process can swap a path it owns for a FIFO or a device (a blocking open() would
hang the root agent for good), or for a symlink to a file it does not own (the
agent would then read, or attach uprobes to, that file). So such a file is opened
once, without blocking, checked on the open file (fstat: no window between check
and use), and then used only through that open file.
"""

from __future__ import annotations

import os
import stat
from typing import Optional


def open_regular(path: str, follow_symlinks: bool = True) -> Optional[tuple[int, os.stat_result]]:
    """(fd, its stat) if path opens, without blocking, as a regular file; else None.
    The caller checks the identity it expects (inode, device) and owns the fd.
    follow_symlinks=False refuses a path whose last component is a symlink (the UI's
    store: a link planted there must not serve a file from elsewhere)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def trusted_uids() -> frozenset[int]:
    """Whose files and directories a command takes as its own: root's, its own user's
    (the effective uid) and, run through sudo, its invoker's (SUDO_UID). The UI's and
    /metrics' token files and the UI's store must be theirs (issue 44)."""
    sudo = os.environ.get("SUDO_UID", "")
    return frozenset({0, os.geteuid()} | ({int(sudo)} if sudo.isdigit() else set()))


def invoker() -> Optional[tuple[int, set[int]]]:
    """(uid, gids) of the user who ran this root process through sudo; None when
    not root or not run through sudo (then the process reads as itself)."""
    import pwd

    if os.geteuid() != 0 or "SUDO_UID" not in os.environ:
        return None
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ.get("SUDO_GID", "-1"))
        name = pwd.getpwuid(uid).pw_name
        return uid, set(os.getgrouplist(name, gid)) | {gid}
    except (KeyError, ValueError, OSError):
        return None


def may(st: os.stat_result, who: tuple[int, set[int]], bits: tuple[int, int, int]) -> bool:
    uid, gids = who
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid in gids:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


def open_for_invoker(path: str) -> tuple[int, os.stat_result]:
    """A file a user named on the command line of a root command, opened as
    open_regular does, and only if that user (sudo's invoker) could read it: the
    file's own mode, and search permission on every directory above it, checked on
    the path the open file really has. OSError with the reason otherwise."""
    got = open_regular(path)
    if got is None:
        import errno

        if not os.path.lexists(path):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        raise OSError(f"{path}: not a readable regular file")
    fd, st = got
    who = invoker()
    if who is None:
        return fd, st
    real = os.readlink(f"/proc/self/fd/{fd}")
    ok = may(st, who, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH))
    d = os.path.dirname(real)
    while ok and d and d != "/":
        try:
            ok = may(os.stat(d), who, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH))
        except OSError:
            ok = False
        d = os.path.dirname(d)
    if not ok:
        os.close(fd)
        raise OSError(f"{path}: user {who[0]}, who ran this through sudo, may not read it")
    return fd, st
