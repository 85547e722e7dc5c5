"""Bad environments give one clear line naming the fix, and a non-zero exit, through the real CLI.

Not-root is real (an unprivileged user namespace). The other cases hide one
prerequisite from the agent's preflight (bcc, kernel headers, uprobes) inside a
child interpreter, then run the real `gpu-agent run` entry point.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.env import agent_cmd, need_ebpf
from support.cli import one_line_error


def run_cli_with(setup: str, *args: str):
    code = "import sys\n" + setup + f"\nfrom gpu_agent.cli import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_not_root():
    proc = subprocess.run(
        ["unshare", "--user", *agent_cmd("run", "--duration", "1")], capture_output=True, text=True, timeout=60
    )
    assert "must run as root" in one_line_error(proc)


def test_record_not_root_does_not_run_the_command(tmp_path):
    marker = tmp_path / "ran"
    proc = subprocess.run(
        ["unshare", "--user", *agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--", "touch", marker)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "must run as root" in one_line_error(proc)
    assert not marker.exists()


@pytest.mark.parametrize(
    "setup, expect",
    [
        # bcc missing: block the module and its distribution fallback directory.
        (
            "sys.modules['bcc'] = None\nimport gpu_agent.probes.preflight as p\np.DIST_PACKAGES = '/nonexistent'",
            "apt-get install python3-bpfcc",
        ),
        # no kernel headers for the running kernel.
        (
            "import os\n_u = os.uname()\n"
            "class U: release = '0.0.0-no-such-kernel'; sysname = _u.sysname; machine = _u.machine\n"
            "os.uname = lambda: U\nos.environ.pop('BCC_KERNEL_SOURCE', None)",
            "apt-get install linux-headers-0.0.0-no-such-kernel",
        ),
        # a kernel without uprobes.
        ("import gpu_agent.probes.preflight as p\np.UPROBE_PMU = '/nonexistent/uprobe'", "no uprobe support"),
    ],
)
def test_missing_prerequisite(setup, expect):
    need_ebpf()
    assert expect in one_line_error(run_cli_with(setup, "run", "--duration", "1"))


def test_bad_interval_is_a_usage_error():
    proc = subprocess.run(agent_cmd("run", "--interval", "soon"), capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid duration 'soon'" in proc.stderr


@pytest.mark.parametrize("extra, refused", [((), True), (("--allow-insecure-token",), False)])
def test_a_bearer_token_over_plaintext_to_another_host_is_refused(tmp_path, extra, refused):
    """grpc:// (no TLS) to a host other than this one would send the token readable on
    the network: one line, exit 2, unless asked for. (Loopback stays allowed.)"""
    need_ebpf()
    token = tmp_path / "token"
    token.write_text("s3cret")
    proc = subprocess.run(
        agent_cmd(
            "run", "--remote-store", "grpc://192.0.2.1:7070", "--bearer-token-file", token, "--duration", "1", *extra
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if refused:
        assert "--allow-insecure-token" in one_line_error(proc)
    else:
        assert proc.returncode == 0, proc.stderr


def test_a_bad_flag_under_a_command_gets_that_commands_usage():
    proc = subprocess.run(agent_cmd("record", "--bogus", "--", "true"), capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: gpu-agent record")
    assert "gpu-agent record: error: unrecognized arguments: --bogus" in proc.stderr
    assert "COMMAND" not in proc.stderr  # not the top level's usage
    typo = subprocess.run(agent_cmd("run", "--intreval", "5s"), capture_output=True, text=True)
    assert typo.returncode == 2 and "(did you mean --interval?)" in typo.stderr, typo.stderr[-300:]


def test_log_level_after_the_command_and_compound_durations():
    from gpu_agent.cli import parse_args
    from gpu_agent.commands.common import duration

    assert parse_args(["run", "--log-level", "debug"]).log_level == "debug"
    assert parse_args(["--log-level", "error", "run"]).log_level == "error"
    assert parse_args(["run"]).log_level == "warning"
    assert duration("1h2m") == 3720 and duration("1m30s") == 90 and duration("2.5") == 2.5
    assert duration("1h 30m") == 5400 and duration("250ms") == 0.25
    for bad in ("1h2x", "0s", "m", "1.2.3s", ""):
        with pytest.raises(Exception, match="invalid duration"):
            duration(bad)


def test_record_takes_a_command_without_dashes():
    from gpu_agent.cli import parse_args

    args = parse_args(["record", "-o", "x.pb.gz", "python", "-c", "print(1)", "-o", "y"])
    assert args.output.name == "x.pb.gz" and args.cmd == ["python", "-c", "print(1)", "-o", "y"]
    assert parse_args(["record", "--", "ls", "-la"]).cmd in (["--", "ls", "-la"], ["ls", "-la"])


def test_command_help_has_a_description_and_examples():
    for cmd in ("run", "record", "trace", "ui"):
        out = subprocess.run(agent_cmd(cmd, "--help"), capture_output=True, text=True).stdout
        assert "examples:\n  gpu-agent " in out, (cmd, out[-400:])
        assert out.split("\n\n")[1].strip(), (cmd, out[:400])  # the description under the usage
    out = subprocess.run(agent_cmd("record", "--help"), capture_output=True, text=True).stdout
    assert "ui.perfetto.dev" in out  # --trace-format says what its formats are for


def test_record_creates_no_directory_for_a_missing_output_dir(tmp_path):
    need_ebpf()
    marker, out = tmp_path / "ran", tmp_path / "no" / "such" / "x.pb.gz"
    proc = subprocess.run(
        agent_cmd("record", "-o", out, "--", "touch", marker), capture_output=True, text=True, timeout=60
    )
    assert f"no directory {out.parent}" in one_line_error(proc)
    assert not (tmp_path / "no").exists() and not marker.exists()


def test_record_of_a_missing_command_fails_before_the_probes_load(tmp_path):
    """No BPF compilation (seconds) for a typo: one line, exit 127, no file."""
    import time

    t0 = time.monotonic()
    proc = subprocess.run(
        agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--", "no-such-command-xyz"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 127 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-agent: error: cannot run no-such-command-xyz: no such command"), lines
    assert time.monotonic() - t0 < 3 and not (tmp_path / "x.pb.gz").exists()


def test_a_short_records_duration_is_the_commands(tmp_path):
    """The profile's Duration (pprof's percentages of it) starts when the command
    does, not before the seconds of BPF compilation."""
    import gzip
    import time

    from support.env import MOCK_APP, mock_env
    from gpu_agent.proto import profile_pb2

    need_ebpf()
    out = tmp_path / "x.pb.gz"
    t0 = time.monotonic()
    proc = subprocess.run(
        agent_cmd("record", "-o", out, "--", MOCK_APP, "--iters", "2"),
        env=mock_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    prof = profile_pb2.Profile.FromString(gzip.decompress(out.read_bytes()))
    assert 0 < prof.duration_nanos / 1e9 < min(2.0, wall - 1.0), (prof.duration_nanos, wall)


def test_ui_over_a_missing_store_says_so(tmp_path):
    proc = subprocess.run(
        agent_cmd("ui", "--profiles", tmp_path / "typo", "--listen", "127.0.0.1:0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"no profile store at {tmp_path / 'typo'}" in one_line_error(proc)


def test_in_kernel_merges_need_somewhere_to_go(tmp_path):
    """--nanotrace with no timeline output, and `timeline merge` with no output, are
    one line each before anything runs; --events alone is an output."""
    marker = tmp_path / "ran"
    proc = subprocess.run(
        agent_cmd("record", "-o", tmp_path / "p.pb.gz", "--nanotrace", tmp_path / "k.nanotrace", "--", "touch", marker),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--nanotrace goes into a timeline: give --trace FILE, --events FILE.ndjson" in one_line_error(proc)
    assert not marker.exists()
    proc = subprocess.run(
        agent_cmd("timeline", "merge", tmp_path / "e.ndjson", tmp_path / "k.nanotrace"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "give -o FILE, --events OUT.ndjson, or both" in one_line_error(proc)
