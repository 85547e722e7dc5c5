"""Splice Python frames into a native stack, the way py-spy --native does.

Both stacks are innermost first. Every native frame of the eval loop
(_PyEval_EvalFrameDefault, also its .cold part) is one call of the
interpreter, which runs a run of Python frames: the frames from where the
previous run ended up to and including the next frame flagged entry
(GA_PYF_ENTRY). Each such native frame is replaced by its run, in order;
every other native frame stays where it is (the CUDA driver and ctypes/torch
C++ frames below, main() and the C runtime above).

When the counts disagree:
  * more runs than eval frames (the native stack was cut at GA_MAX_FRAMES, or
    the eval loop has no symbol): the remaining runs go right after the last
    replaced frame (at the outer end if the native stack was cut or nothing
    was replaced), so every Python frame is shown, in order;
  * more eval frames than runs (the Python walk stopped early): the remaining
    eval frames stay native.
"""

from __future__ import annotations

from typing import Callable, Sequence

EVAL_FUNCTIONS = ("_PyEval_EvalFrameDefault", "PyEval_EvalFrameDefault")


def is_eval_frame(function: str) -> bool:
    return function.startswith(EVAL_FUNCTIONS)


def runs(py_frames: Sequence) -> list:
    """Split Python frames (innermost first, with .entry) into eval-loop runs."""
    out, cur = [], []
    for f in py_frames:
        cur.append(f)
        if f.entry:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def merge(
    native: Sequence, py_frames: Sequence, *, native_truncated: bool = False, name_of: Callable = lambda f: f.function
) -> list:
    """The merged stack, innermost first: native frames, with eval frames replaced."""
    if not py_frames:
        return list(native)
    rs = runs(py_frames)
    out: list = []
    ri = 0
    last = None  # index in out just past the last replaced run
    for f in native:
        if ri < len(rs) and is_eval_frame(name_of(f)):
            out.extend(rs[ri])
            ri += 1
            last = len(out)
        else:
            out.append(f)
    if ri < len(rs):
        rest = [f for r in rs[ri:] for f in r]
        if native_truncated or last is None:
            out.extend(rest)
        else:
            out[last:last] = rest
    return out
