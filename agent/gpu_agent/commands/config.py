"""Flags from the command line, the environment and a config file, generically over argparse.

Precedence, highest first (one rule for every flag of a command that opts in):

    1. the command line            gpu-agent run --interval 5s
    2. the environment             GPU_AGENT_RUN_INTERVAL=5s
    3. the config file             interval: 5s      (--config FILE, $GPU_AGENT_RUN_CONFIG,
                                                      else /etc/gpu-agent/config.yaml if it exists)
    4. the built-in default

Names: a flag `--output-dir` is `GPU_AGENT_RUN_OUTPUT_DIR` in the environment and
`output-dir:` (or `output_dir:`) in the file. The prefix is GPU_AGENT_<COMMAND>_
so the agent's settings never collide with the shim's own GPU_AGENT_* knobs
(the shim treats every GPU_AGENT_RUN_* name as known and ignores it). Boolean
flags take true/false, 1/0, yes/no, on/off. Values are checked by the flag's own
parser, so `interval: 10s` and `GPU_AGENT_RUN_INTERVAL=500ms` mean what they mean
on the command line; an unknown key in the file is an error.

New flags added to an opted-in command get all of this for free.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_CONFIG = Path("/etc/gpu-agent/config.yaml")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(RuntimeError):
    pass


def enable(parser: argparse.ArgumentParser, command: str) -> None:
    """Give `parser` (one subcommand) a --config flag and env/file defaults for every flag."""
    prefix = f"GPU_AGENT_{command.upper().replace('-', '_')}_"
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"YAML file of flag values (default {DEFAULT_CONFIG} if it exists; "
        f"${prefix}CONFIG). Precedence: command line > ${prefix}<FLAG> "
        "environment > config file > default",
    )
    parser.set_defaults(_config_prefix=prefix)


def env_name(prefix: str, action: argparse.Action) -> str:
    return prefix + action.dest.upper()


def _settable(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if not a.option_strings or a.dest in ("help", "config") or a.dest == argparse.SUPPRESS:
            continue
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            continue
        yield a


def _is_bool(a: argparse.Action) -> bool:
    return (
        isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        or type(a).__name__ == "BooleanOptionalAction"
    )


def _convert(a: argparse.Action, value, where: str):
    if _is_bool(a):
        if isinstance(value, bool):
            v = value
        else:
            text = str(value).strip().lower()
            if text in _TRUE:
                v = True
            elif text in _FALSE:
                v = False
            else:
                raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return v if not isinstance(a, argparse._StoreFalseAction) else not v
    if value is None:
        return None
    if a.nargs in ("*", "+") or isinstance(a, argparse._AppendAction):
        items = value if isinstance(value, list) else str(value).split(",")
        return [_convert_one(a, x, where) for x in items if str(x).strip() != ""]
    if isinstance(value, (list, dict)):
        raise ConfigError(f"{where}: expected one value, got {value!r}")
    return _convert_one(a, value, where)


def _convert_one(a: argparse.Action, value, where: str):
    text = str(value)
    try:
        v = a.type(text) if a.type is not None else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    if a.choices is not None and v not in a.choices:
        raise ConfigError(f"{where}: {v!r} is not one of {', '.join(map(str, a.choices))}")
    return v


def load_file(path: Path) -> dict:
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        raise ConfigError("reading a config file needs PyYAML (pip install pyyaml)") from None
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of flag names to values")
    return data


def layered_defaults(parser: argparse.ArgumentParser, prefix: str, cli_config: str | None, environ=None) -> dict:
    """dest -> value from the config file, overridden by the environment."""
    environ = os.environ if environ is None else environ
    actions = {a.dest: a for a in _settable(parser)}
    by_key = {}
    for a in actions.values():
        for opt in a.option_strings:
            if opt.startswith("--"):
                by_key[opt[2:]] = a
                by_key[opt[2:].replace("-", "_")] = a
    out: dict = {}

    path, explicit = cli_config or environ.get(prefix + "CONFIG"), True
    if not path:
        path, explicit = DEFAULT_CONFIG, False
    path = Path(path)
    if explicit or path.exists():
        data = load_file(path)
        unknown = sorted(str(k) for k in data if str(k) not in by_key)
        if unknown:
            known = sorted({o[2:] for a in actions.values() for o in a.option_strings if o.startswith("--")})
            raise ConfigError(f"config file {path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for k, v in data.items():
            a = by_key[str(k)]
            out[a.dest] = _convert(a, v, f"config file {path}: {k}")

    for a in actions.values():
        name = env_name(prefix, a)
        if name in environ:
            out[a.dest] = _convert(a, environ[name], f"environment {name}")
    return out


def apply(
    parser: argparse.ArgumentParser, sub: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace
) -> argparse.Namespace:
    """Re-parse argv with the file and environment as defaults: the command line still wins."""
    prefix = getattr(args, "_config_prefix", None)
    if not prefix:
        return args
    try:
        defaults = layered_defaults(sub, prefix, args.config)
    except ConfigError as e:
        parser.exit(2, f"gpu-agent: error: {e}\n")
    if not defaults:
        return args
    sub.set_defaults(**defaults)
    return parser.parse_args(argv)


def describe(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, str, str]]:
    """(flag, environment variable, file key) for every settable flag: for docs and tests."""
    rows = []
    for a in _settable(parser):
        long = next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
        rows.append((long, env_name(prefix, a), long.lstrip("-")))
    return rows
