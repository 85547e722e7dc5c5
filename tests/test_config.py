"""gpu-agent run's flags from the command line, GPU_AGENT_RUN_* and a YAML config file:
one precedence (CLI > environment > file > default), generic over every flag."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, agent_cmd, mock_env
from gpu_agent import cli
from gpu_agent.commands import config


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    import os

    for k in [k for k in os.environ if k.startswith("GPU_AGENT_RUN_")]:
        monkeypatch.delenv(k)
    # never read the machine's /etc/gpu-agent/config.yaml in these tests
    monkeypatch.setattr(config, "DEFAULT_CONFIG", tmp_path / "absent.yaml")


def write(tmp_path, text) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def test_defaults_without_file_or_env():
    a = cli.parse_args(["run"])
    assert a.interval == 10.0 and a.shim is None and a.kube_pods_url == "auto"


def test_precedence_cli_over_env_over_file_over_default(tmp_path, monkeypatch):
    f = write(
        tmp_path,
        "interval: 5s\noutput-dir: /var/lib/gpu-agent\nduration: 2m\n"
        "kube_refresh: 45s\nkube-insecure-skip-tls-verify: true\n",
    )
    a = cli.parse_args(["run", "--config", str(f)])
    assert (a.interval, a.output_dir, a.duration, a.kube_refresh) == (5.0, Path("/var/lib/gpu-agent"), 120.0, 45.0)
    assert a.kube_insecure_skip_tls_verify is True
    monkeypatch.setenv("GPU_AGENT_RUN_INTERVAL", "500ms")
    monkeypatch.setenv("GPU_AGENT_RUN_KUBE_INSECURE_SKIP_TLS_VERIFY", "false")
    a = cli.parse_args(["run", "--config", str(f)])
    assert a.interval == 0.5 and a.kube_insecure_skip_tls_verify is False
    assert a.output_dir == Path("/var/lib/gpu-agent")  # still from the file
    a = cli.parse_args(["run", "--config", str(f), "--interval", "3s", "--kube-insecure-skip-tls-verify"])
    assert a.interval == 3.0 and a.kube_insecure_skip_tls_verify is True


def test_config_path_from_env_and_default_location(tmp_path, monkeypatch):
    f = write(tmp_path, "shim: /opt/gpu-agent/lib/libgpu_agent_shim.so\n")
    monkeypatch.setenv("GPU_AGENT_RUN_CONFIG", str(f))
    assert cli.parse_args(["run"]).shim == "/opt/gpu-agent/lib/libgpu_agent_shim.so"
    monkeypatch.delenv("GPU_AGENT_RUN_CONFIG")
    monkeypatch.setattr(config, "DEFAULT_CONFIG", f)
    assert cli.parse_args(["run"]).shim == "/opt/gpu-agent/lib/libgpu_agent_shim.so"


def test_every_run_flag_has_an_env_name_that_the_shim_ignores():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices["run"]
    rows = config.describe(sub, "GPU_AGENT_RUN_")
    assert ("--output-dir", "GPU_AGENT_RUN_OUTPUT_DIR", "output-dir") in rows
    shim_names = {
        "GPU_AGENT_SAMPLE_PERIOD",
        "GPU_AGENT_GRAPH_SAMPLE_PERIOD",
        "GPU_AGENT_POLL_MS",
        "GPU_AGENT_FLUSH_MS",
        "GPU_AGENT_DEBUG",
        "GPU_AGENT_CUPTI_PATH",
    }
    assert not shim_names & {env for _, env, _ in rows}
    # The shim names unknown GPU_AGENT_* variables on stderr, but not the agent's own.
    p = subprocess.run(
        [str(MOCK_APP), "--paths", "cuLaunchKernel", "--iters", "1"],
        env=mock_env(CUDA_INJECTION64_PATH=str(SHIM), GPU_AGENT_RUN_OUTPUT_DIR="/x", GPU_AGENT_NO_SUCH_SETTING="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "unknown environment variable(s) ignored: GPU_AGENT_NO_SUCH_SETTING" in p.stderr, p.stderr
    assert "GPU_AGENT_RUN_" not in p.stderr, p.stderr


@pytest.mark.parametrize(
    "text,env,msg",
    [
        ("intervall: 5s\n", {}, "unknown key(s) intervall"),
        ("interval: soon\n", {}, "invalid duration"),
        ("- a\n- b\n", {}, "expected a mapping"),
        ("interval: [1, 2]\n", {}, "expected one value"),
        ("", {"GPU_AGENT_RUN_INTERVAL": "-1"}, "GPU_AGENT_RUN_INTERVAL"),
        ("", {"GPU_AGENT_RUN_KUBE_INSECURE_SKIP_TLS_VERIFY": "maybe"}, "expected true or false"),
    ],
)
def test_errors_are_one_line_and_name_the_source(tmp_path, text, env, msg):
    f = write(tmp_path, text)
    import os

    r = subprocess.run(
        agent_cmd("run", "--config", f, "--duration", "1s"),
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}, **env},
        timeout=60,
    )
    assert r.returncode == 2
    assert msg in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_missing_explicit_config_file_is_an_error(tmp_path):
    r = subprocess.run(agent_cmd("run", "--config", tmp_path / "nope.yaml"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nope.yaml" in r.stderr
