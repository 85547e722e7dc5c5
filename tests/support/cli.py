"""How a CLI failure must look: one line naming the fix, exit 2."""

from __future__ import annotations


# The wait before the probes watch is said at once (commands/common.say_loading): a
# progress line, not a part of the error.
LOADING = "gpu-agent: loading the eBPF probes"


def one_line_error(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith(LOADING)]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-agent: error: ")
    return lines[0]
