"""The README's usage blocks, run as printed, on the mock CUDA stack.

Covered: every line of the sh blocks under "## Try it without a GPU" and "## Use",
in one bash session per block (so `export` and `$!` carry), as root:
- `sudo ` is dropped (CI and these machines run as root, without sudo);
- `make …` lines are not run here: `make demo` is tests/test_newcomer.py, `make test`
  is CI itself, and `make run` would stay in the foreground;
- a server (`gpu-agent run` without `--duration`, `gpu-agent ui`, `pprof -http`), with
  or without a trailing `&`, starts in the background, must come up (its ready line, or its URL answering) and keep
  running until the block ends; then it gets SIGTERM (what Ctrl-C is to it: a
  non-interactive shell's background jobs ignore SIGINT);
- every other line must exit 0.
"## Use" runs in a fresh directory that holds a `train.py` and a `serve.py` of the
test's own (tests/readme_workload.py) and a link to the repository's .venv, with the
mock stack on LD_LIBRARY_PATH: the user's GPU program, stood in for. "## Try it
without a GPU" runs in the repository, as its lines expect.
Not covered: the Parca, OTLP and Prometheus blocks (they need servers that
tests/test_export.py and tests/test_metrics.py start on their own terms).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess

from support.env import MOCK_DIR, REPO, need_ebpf
from support.pprof_tool import raw
from support.ui import Ui, http_get

import py_workload

SERVERS = [  # (pattern, how we know it is up: a ready line in its output, or a URL)
    (re.compile(r"\bgpu-agent run\b(?!.*--duration)"), ("line", "gpu-agent: watching every process")),
    (re.compile(r"\bgpu-agent ui\b"), ("url", "http://127.0.0.1:7071/api/range")),
    (re.compile(r"\bpprof -http :(\d+)"), ("url", "http://127.0.0.1:{0}/")),
]


def readme_blocks(text: str) -> dict[str, list[str]]:
    """heading -> the command lines of its sh blocks (continuations joined)."""
    blocks: dict[str, list[str]] = {}
    heading, fence = None, None
    for line in text.splitlines():
        if fence is None and line.startswith("## "):
            heading = line[3:].strip()
        elif fence is None and line.strip() == "```sh":
            fence = []
        elif fence is not None and line.strip() == "```":
            blocks.setdefault(heading, []).extend(_join(fence))
            fence = None
        elif fence is not None:
            fence.append(line)
    return blocks


def _join(lines: list[str]) -> list[str]:
    out, cur = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
        else:
            out.append((cur + line).strip())
            cur = ""
    return [c for c in out if c and not c.startswith("#")]


def _command(line: str) -> str:
    """The line without its trailing comment (two spaces, then #)."""
    return re.split(r"\s{2,}#\s", line, maxsplit=1)[0].strip()


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def script(lines: list[str], logs: str) -> tuple[str, list[str]]:
    """A bash script that runs the lines as described above; and what it leaves out."""
    out = [
        "set -u",
        "ga_servers=()",
        # SIGTERM: a non-interactive shell's background jobs ignore SIGINT
        'ga_stop() { for p in "${ga_servers[@]}"; do pkill -TERM -P "$p"; kill -TERM "$p" 2>/dev/null; done; '
        'for p in "${ga_servers[@]}"; do for _ in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; '
        'sleep 0.5; done; kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }',
        "trap ga_stop EXIT",
        # ready: $1 pid, $2 kind, $3 what, $4 log
        "ga_ready() { for _ in $(seq 1 180); do "
        'kill -0 "$1" 2>/dev/null || { echo "README: it exited:"; tail -20 "$4"; return 1; }; '
        'if [ "$2" = line ]; then grep -q "$3" "$4" && return 0; '
        'else curl -sf -o "$4.body" "$3" && return 0; fi; sleep 0.5; done; '
        'echo "README: not up after 90 s:"; tail -20 "$4"; return 1; }',
    ]
    left = []
    for i, line in enumerate(lines):
        cmd = _command(line)
        if cmd.startswith("sudo "):
            cmd = cmd[5:]
        if re.match(r"make\b", cmd):
            left.append(line)
            continue
        out.append(f"echo {shlex.quote('README> ' + line)} >&2")
        server = next(((m, how) for pattern, how in SERVERS if (m := pattern.search(cmd))), None)
        if server:  # in the background either way, and waited for
            cmd = cmd.removesuffix("&").rstrip()
            m, (kind, what) = server
            what = what.format(*m.groups())
            port = re.search(r":(\d+)/", what)
            if port and _port_busy(int(port.group(1))):
                left.append(f"{line} (port {port.group(1)} busy)")
                continue
            log = f"{logs}/server{i}.log"
            out += [
                f"eval {shlex.quote(cmd + f' > {log} 2>&1 &')}",
                "ga_servers+=($!)",
                f"ga_ready $! {kind} {shlex.quote(what)} {log} || exit 3",
            ]
        elif cmd.endswith("&"):
            out += [f"eval {shlex.quote(cmd)}", "ga_servers+=($!)"]
        else:
            out.append(
                f"eval {shlex.quote(cmd)} || {{ rc=$?; echo {shlex.quote('README: failed: ' + line)}"
                f' "(exit $rc)"; exit 2; }}'
            )
    return "\n".join(out) + "\n", left


def run_block(lines: list[str], cwd, logs, **env) -> subprocess.CompletedProcess:
    text, left = script(lines, str(logs))
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_AGENT_", "MOCK_CUDA_"))}
    e.pop("CUDA_INJECTION64_PATH", None)
    e.update(env)
    p = subprocess.run(["bash", "-c", text], cwd=cwd, env=e, capture_output=True, text=True, timeout=300)
    p.left_out = left
    return p


def test_the_try_it_without_a_gpu_block_runs_as_printed(tmp_path):
    need_ebpf()
    lines = readme_blocks((REPO / "README.md").read_text())["Try it without a GPU"]
    shutil.rmtree(REPO / "demo-profiles", ignore_errors=True)
    try:
        p = run_block(lines, REPO, tmp_path)
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
        assert [line for line in p.left_out if "make demo" not in line] == [], p.left_out
        # run found the workload by itself; the UI served its intervals
        # (in collection windows: which of its phases a window met varies)
        kernels = {s.frames[0] for f in (REPO / "demo-profiles").glob("*.pb.gz") for s in raw(f)}
        assert kernels and kernels <= set(py_workload.KERNELS), kernels
        served = json.loads(next(tmp_path.glob("server*.log.body")).read_text())  # the block's UI came up
        assert "tree" in served, served
        # and that store in the UI (the block's UI may have answered before run wrote
        # its last interval: the workload's windows come out when it exits)
        ui = Ui(REPO / "demo-profiles")
        try:
            status, _, body = http_get(ui.port, "/api/range")
        finally:
            ui.stop()
        assert status == 200 and any(k in body.decode() for k in kernels), body[:500]
    finally:
        shutil.rmtree(REPO / "demo-profiles", ignore_errors=True)
        (REPO / "demo-truth.json").unlink(missing_ok=True)


def test_the_use_block_runs_as_printed(tmp_path):
    need_ebpf()
    lines = readme_blocks((REPO / "README.md").read_text())["Use"]
    work = tmp_path / "work"
    work.mkdir()
    for name in ("train.py", "serve.py"):
        shutil.copy(REPO / "tests" / "readme_workload.py", work / name)
    (work / ".venv").symlink_to(REPO / ".venv", target_is_directory=True)
    p = run_block(lines, work, tmp_path, LD_LIBRARY_PATH=str(MOCK_DIR))
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    assert "Type: gpu_time" in p.stdout and "k_train" in p.stdout, p.stdout[-2000:]  # pprof -top
    assert {s.frames[0] for s in raw(work / "out.pb.gz")} == {"k_train"}
    from support.perfetto_read import read_perfetto

    for trace, kernel in (("run.perfetto-trace", "k_train"), ("cap.perfetto-trace", "k_serve")):
        slices = read_perfetto(work / trace)[2]
        assert kernel in {s["name"] for s in slices}, (trace, p.stderr[-2000:])
    # `run` profiled serve.py, which it was never told about
    assert "k_serve" in {s.frames[0] for f in (work / "profiles").glob("*.pb.gz") for s in raw(f)}
