"""How a CLI failure must look (one line naming the fix, exit 2), and reading a
running command's progress lines."""

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


def until_line(stream, part: str) -> str:
    """A child's stream read up to and with its first line holding `part` (what it said
    so far, for the caller's messages); fails if the stream ends first. A wait for the
    event the line says, not a sleep standing for it."""
    said = ""
    while True:
        line = stream.readline()
        assert line, said[-2000:]
        said += line
        if part in line:
            return said
