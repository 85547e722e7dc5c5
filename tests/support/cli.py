"""How a CLI failure must look: one line naming the fix, exit 2."""

from __future__ import annotations


def one_line_error(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-agent: error: ")
    return lines[0]
