"""Atomic file replacement: readers see the old file or the new one, never a part."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import BinaryIO, Union


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, BinaryIO], mode: int = 0o644) -> None:
    """Write data (bytes, or a file to copy) to a temp file beside path, fsync, chmod, rename."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, (bytes, bytearray)):
                f.write(data)
            else:
                shutil.copyfileobj(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
