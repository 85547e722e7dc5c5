"""`gpu-agent` command line: one module per subcommand in gpu_agent.commands."""

from __future__ import annotations

import argparse
import logging
import sys

from . import __version__, config
from .commands import health, install_shim, record, run, shim_path, trace, ui
from .paths import MissingPartError
from .preflight import PreflightError
from .shim_attach import BpfError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-agent",
        description="System-wide GPU profiler: which Python and native code burns GPU time.")
    parser.add_argument("--version", action="version", version=f"gpu-agent {__version__}")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                        help="agent log verbosity on stderr (default warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in (run, record, trace, shim_path, install_shim, health, ui):
        mod.add_parser(sub)
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    # Flags of commands that opted in may also come from the environment and a config file.
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return config.apply(parser, sub.choices[args.command], argv, args)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="gpu-agent: %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (PreflightError, MissingPartError, BpfError) as e:  # a bad --shim, a refused attach
        print(f"gpu-agent: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
