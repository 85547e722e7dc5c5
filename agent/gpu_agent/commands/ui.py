"""`gpu-agent ui`: a web UI over a profile store, in a browser, with no network.

Flame graphs, time ranges, filters, a top table and diffs of the pprofs that
`gpu-agent run` writes (docs/ui.md). Read-only: it never writes into the store.
`gpu-agent run --ui ADDR` serves the same UI beside a running agent, whose health
its status page then shows; standalone, the status page describes the store alone.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:7071"


def add_parser(sub) -> None:
    p = sub.add_parser("ui", help="serve a web UI (flame graphs, ranges, diffs) over a profile store")
    p.add_argument(
        "--profiles",
        default=Path("./profiles"),
        type=Path,
        metavar="DIR",
        help="the store `gpu-agent run` writes (default ./profiles)",
    )
    add_listen_arguments(p, "--listen", DEFAULT_LISTEN)
    p.set_defaults(func=main)


def add_listen_arguments(p, flag: str, default) -> None:
    """--listen (ui) or --ui (run), and --ui-token-file, shared by both commands."""
    p.add_argument(
        flag,
        default=default,
        metavar="HOST:PORT",
        help=f"address of the UI (default {default or 'off'}; on loopback without a token "
        "it serves root and its own user only; 0.0.0.0:PORT listens on every "
        "interface, and then needs --ui-token-file)",
    )
    p.add_argument(
        "--ui-token-file",
        default=None,
        metavar="FILE",
        help="require 'Authorization: Bearer <token>' (a browser: open /?token=<token> "
        "once); the file is re-read when it changes",
    )


def start(store: Path, listen: str, token_file, health=None):
    """Start the server in a thread, or exit 2 with one line; says where it listens."""
    from ..outputs.ui import server
    from ..profile.store import dir_error

    refused = dir_error(Path(store).resolve())
    if refused:  # whoever may write the store decides what the UI serves (issue 44)
        print(f"gpu-agent: error: refusing the profile store: {refused}", file=sys.stderr)
        raise SystemExit(2)
    try:
        refused = server.exposure_error(listen, token_file)
        if refused:
            raise ValueError(refused)
        srv = server.serve(store, listen, token_file, health=health)
    except (ValueError, OSError) as e:
        print(f"gpu-agent: error: cannot serve the UI on {listen}: {e}", file=sys.stderr)
        raise SystemExit(2)
    profiles = srv.api.store.profiles()
    opened = srv.api.store.open(profiles[-1].name) if profiles else None
    if opened is not None:
        os.close(opened[0])
    elif profiles:
        print(
            f"gpu-agent: warning: cannot read {profiles[-1].name} in {store} (the agent writes "
            "its profiles readable by root only): run the UI as root, or beside the agent "
            "(gpu-agent run --ui)",
            file=sys.stderr,
            flush=True,
        )
    print(f"gpu-agent: UI on {srv.url} over {Path(store).resolve()}", file=sys.stderr, flush=True)
    return srv


def main(args) -> int:
    stop = {"now": False}

    def _stop(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from ..outputs.ui.server import wait_forever

    if not Path(args.profiles).is_dir():  # a typo would serve an empty UI without a word
        print(
            f"gpu-agent: error: no profile store at {args.profiles} (`gpu-agent run --output-dir DIR` writes one)",
            file=sys.stderr,
        )
        return 2
    srv = start(args.profiles, args.listen, args.ui_token_file)
    try:
        wait_forever(lambda: stop["now"])
    finally:
        srv.shutdown()
        srv.server_close()
    return 0
