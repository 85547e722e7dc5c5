"""`gpu-agent` command line: one module per subcommand in gpu_agent.commands."""

from __future__ import annotations

import argparse
import difflib
import logging
import sys

from . import __version__
from .commands import config
from .commands import health, install_shim, record, run, shim_path, timeline, trace, ui
from .probes.paths import MissingPartError
from .probes.preflight import PreflightError
from .probes.shim_attach import BpfError


LOG_LEVELS = ["debug", "info", "warning", "error"]

# Each command's --help ends with examples a newcomer can paste.
EXAMPLES = {
    "run": [
        "gpu-agent run --output-dir ./profiles          # every process on this node that loads the shim",
        "gpu-agent run --duration 1h2m --interval 30s",
        "gpu-agent run --metrics-addr                   # GPU time per kernel on 127.0.0.1:9464/metrics",
    ],
    "record": [
        "gpu-agent record -o gpu.pb.gz -- python train.py --epochs 1",
        "gpu-agent record --trace run.perfetto-trace -- ./my_cuda_app",
        "go tool pprof -top gpu.pb.gz                    # read it",
    ],
    "trace": ["gpu-agent trace --pid 1234 --duration 5s -o now.perfetto-trace"],
    "timeline": ["gpu-agent timeline merge run.ndjson gemm.nanotrace -o run.perfetto-trace"],
    "ui": ["gpu-agent ui --profiles ./profiles              # then open http://127.0.0.1:7071"],
    "health": ["gpu-agent health && echo ready"],
    "shim-path": ["CUDA_INJECTION64_PATH=$(gpu-agent shim-path) python train.py"],
    "install-shim": ["gpu-agent install-shim /opt/gpu-agent"],
}


def _polish(name: str, p: argparse.ArgumentParser, help_text: str | None) -> None:
    """A command's own --log-level (the top-level one works too), its one-line help as
    the description of its --help, and its examples."""
    p.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        choices=LOG_LEVELS,
        help="agent log verbosity on stderr (default warning)",
    )
    p.description = p.description or (help_text[:1].upper() + help_text[1:] + "." if help_text else None)
    if name in EXAMPLES:
        p.epilog = "examples:\n" + "\n".join("  " + e for e in EXAMPLES[name])
        p.formatter_class = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-agent", description="System-wide GPU profiler: which Python and native code burns GPU time."
    )
    parser.add_argument("--version", action="version", version=f"gpu-agent {__version__}")
    parser.add_argument(
        "--log-level", default="warning", choices=LOG_LEVELS, help="agent log verbosity on stderr (default warning)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in (run, record, trace, timeline, shim_path, install_shim, health, ui):
        mod.add_parser(sub)
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():
        _polish(name, p, helps.get(name))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if extra:  # said by the command's own parser: its usage, not the top level's 25 lines
        cmd = sub.choices[args.command]
        options = [o for a in cmd._actions for o in a.option_strings if o.startswith("--")]
        near = [
            m for x in extra if x.startswith("--") for m in difflib.get_close_matches(x.split("=")[0], options, n=1)
        ]
        cmd.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {' '.join(near)}?)" if near else ""))
    # Flags of commands that opted in may also come from the environment and a config file.
    return config.apply(parser, sub.choices[args.command], argv, args)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()), format="gpu-agent: %(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.func(args)
    except (PreflightError, MissingPartError, BpfError) as e:  # a bad --shim, a refused attach
        print(f"gpu-agent: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
