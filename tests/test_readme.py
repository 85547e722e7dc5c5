"""The README's usage blocks, run as printed, on the mock CUDA stack.

"## Try it without a GPU" is pasted whole into an interactive bash on a pty, as a
person pastes it, with no waits of the test's own (paste()); its `make` line is
tests/test_newcomer.py's. Its UI must serve the workload's intervals.

"## Use": every line of its sh blocks, in one bash session (so `export` and `$!`
carry), as root:
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

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time

import pytest

from support.env import MOCK_DIR, REPO, need_ebpf
from support.pprof_tool import raw
from support.ui import http_get

import py_workload

SERVERS = [  # (pattern, how we know it is up: a ready line in its output, or a URL)
    (re.compile(r"\bgpu-agent run\b(?!.*--(duration|detach))"), ("line", "gpu-agent: watching every process")),
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


def paste(lines: list[str], cwd, env: dict, done, timeout: float = 240) -> str:
    """The lines pasted whole into an interactive bash on a pty, as a person pastes
    them: no waits of our own, each line read by bash when the one before has
    finished. done(output so far) says when to stop; then Ctrl-C (a foreground server)
    and `exit`. Returns what the terminal showed."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: bash on the pty
        os.chdir(cwd)
        os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
    out, end = b"", time.monotonic() + timeout
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
        while time.monotonic() < end and not done(out.decode(errors="replace")):
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:  # bash is gone
                    break
        os.write(fd, b"\x03")  # Ctrl-C: the foreground server
        time.sleep(0.5)
        os.write(fd, b"exit\n")
        # until bash is gone (the detached agent keeps the terminal open: no EOF)
        quit_by = time.monotonic() + 30
        while time.monotonic() < quit_by and os.waitpid(pid, os.WNOHANG) == (0, 0):
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
    return out.decode(errors="replace")


def test_the_try_it_without_a_gpu_block_works_pasted(tmp_path):
    """Issue 45: pasted as printed, `run &` returned at once and the workload on the
    next line was over before the probes watched: every profile was empty. `run
    --detach` returns once they watch."""
    need_ebpf()
    lines = readme_blocks((REPO / "README.md").read_text())["Try it without a GPU"]
    lines = [_command(ln) for ln in lines if not re.match(r"(sudo )?make\b", _command(ln))]  # make demo: test_newcomer
    if _port_busy(7071):
        pytest.fail("port 7071 is busy: the README's UI needs it")
    shutil.rmtree(REPO / "demo-profiles", ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_AGENT_", "MOCK_CUDA_"))}
    env.pop("CUDA_INJECTION64_PATH", None)
    env["PS1"] = "$ "

    answered = []

    def served(_out: str) -> bool:  # the block's UI answers, with the workload's intervals
        try:
            status, _, body = http_get(7071, "/api/range")
        except OSError:
            return False
        if status == 200 and any(k in body.decode() for k in py_workload.KERNELS):
            answered.append(body)
        return bool(answered)

    shown = ""
    try:
        shown = paste(lines, REPO, env, served)
        assert answered, shown[-3000:]
        # run found the workload by itself: its Python processes' kernels are the
        # workload's (the agent watches the node, where other tests' mock processes may run)
        samples = [s for f in (REPO / "demo-profiles").glob("*.pb.gz") for s in raw(f)]
        kernels = {s.frames[0] for s in samples if s.labels.get("comm", "").startswith("python")}
        assert kernels and kernels <= set(py_workload.KERNELS), (
            {(s.frames[0], s.labels.get("comm")) for s in samples},
            shown[-3000:],
        )
        # Ctrl-C stops the UI with no traceback (its decode workers printed one each)
        assert "Traceback" not in shown, shown[-3000:]
    finally:
        agent = re.search(r"watching in the background as pid (\d+)", shown)
        if agent:
            os.kill(int(agent[1]), signal.SIGTERM)
            for _ in range(120):
                if not os.path.exists(f"/proc/{agent[1]}"):
                    break
                time.sleep(0.25)
        shutil.rmtree(REPO / "demo-profiles", ignore_errors=True)
        (REPO / "demo-truth.json").unlink(missing_ok=True)
    assert agent, shown[-3000:]


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
