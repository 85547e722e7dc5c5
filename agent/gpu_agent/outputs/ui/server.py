"""The UI's HTTP server: the page, its bundled scripts, and a read-only JSON API over
one profile store (docs/ui.md lists the routes).

The standard library's ThreadingHTTPServer; every route is a GET (or HEAD): nothing
the UI serves can change the store. A request names a time range, never a path,
except /files/NAME, whose NAME must be a store file's name (store.py).

Security: loopback by default, and there without a token it serves only root and
the user who started it (and SUDO_UID's): every other local user is refused, by the
uid the kernel's socket table gives the connection (httpbounds.py), since the store
holds root's 0600 profiles. Given a token file, every request must carry the token
(Authorization: Bearer, or the cookie that `/?token=…` sets for a browser), from
any user; beyond loopback a token file is required. On loopback, a request for
another Host is refused, so that a web page cannot reach the UI through DNS
rebinding. At most 32 requests at once, 8 from one user or address, each idle at
most 10 s (httpbounds.BoundedThreads).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

from ..httpbounds import BoundedThreads, TokenFile
from ...system.safe_open import trusted_uids
from ..httpbounds import is_loopback as ip_is_loopback
from .api import Api, BadRequest, Stream
from ...profile.store import Store

STATIC = Path(__file__).resolve().parent / "static"
# Every file the UI serves from the package: a fixed table, never a path from a request.
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/chart.js": ("chart.js", "text/javascript; charset=utf-8"),
    "/static/views.js": ("views.js", "text/javascript; charset=utf-8"),
    "/static/timeline.js": ("timeline.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    "/static/vendor/flamegraph.js": ("vendor/flamegraph.js", "text/javascript; charset=utf-8"),
    "/static/vendor/flamegraph.css": ("vendor/flamegraph.css", "text/css; charset=utf-8"),
    "/static/vendor/THIRD_PARTY_LICENSES.txt": ("vendor/THIRD_PARTY_LICENSES.txt", "text/plain; charset=utf-8"),
}
COOKIE = "gpu_agent_ui_token"
TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s]*")
LOOPBACK_NAMES = ("localhost",)
log = logging.getLogger("gpu_agent.ui")


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:7071', ':7071' (loopback), '0.0.0.0:7071', '[::1]:7071' -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"invalid listen address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:7071")
    return host.strip("[]") or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    """A loopback name or address (httpbounds.is_loopback: the addresses)."""
    return host in LOOPBACK_NAMES or ip_is_loopback(host)


def own_uids() -> frozenset:
    """Who a loopback UI without a token serves: root, its own user, and the user
    who ran it through sudo."""
    return trusted_uids()


class UiServer(BoundedThreads, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], api: Api, token: Optional[TokenFile]):
        self.api = api
        self.token = token
        self.loopback_only = is_loopback(addr[0])
        self.uids = own_uids()
        if ":" in addr[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(addr, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


class Handler(BaseHTTPRequestHandler):
    server: UiServer
    server_version = "gpu-agent-ui"
    sys_version = ""

    def log_message(self, fmt, *args):  # the agent's log, not stderr lines per request
        # a browser's first request carries the token in its query (/?token=…): not logged
        args = tuple(TOKEN_IN_QUERY.sub(r"\1<redacted>", a) if isinstance(a, str) else a for a in args)
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _refuse_method(self):
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n", "text/plain", extra={"Allow": "GET, HEAD"}
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    # -- checks -------------------------------------------------------------
    def _host_ok(self) -> bool:
        """On loopback, only requests addressed to a loopback name: a page of another
        site that rebinds its name to 127.0.0.1 sends its own name as Host."""
        if not self.server.loopback_only:
            return True
        host = (self.headers.get("Host") or "").strip()
        if not host:
            return True  # an HTTP/1.0 client (curl -0, scripts): browsers always send one
        if host.startswith("["):
            name = host[1:].split("]", 1)[0]
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return is_loopback(name)

    def _offered_token(self) -> str:
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        for part in (self.headers.get("Cookie") or "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == COOKIE:
                return urllib.parse.unquote(v)
        return ""

    # -- dispatch -----------------------------------------------------------
    def _serve(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        path = url.path
        if not self._host_ok():
            return self._send(HTTPStatus.FORBIDDEN, b"forbidden host\n", "text/plain", head=head)
        token = self.server.token
        if token is None and self.server.loopback_only:
            peer = self.server.peer()
            if not (isinstance(peer, tuple) and peer[0] == "uid" and peer[1] in self.server.uids):
                who = ", ".join(str(u) for u in sorted(self.server.uids))
                return self._send(
                    HTTPStatus.FORBIDDEN,
                    f"this UI serves uid {who} only: start it with --ui-token-file to let other users in\n".encode(),
                    "text/plain",
                    head=head,
                )
        if token is not None:
            offered = (params.get("token") or [""])[-1] if path == "/" else ""
            if offered and token.matches(offered):
                # A browser cannot send a header from a typed URL: the token becomes a
                # cookie, and the URL that carried it is left at once.
                cookie = f"{COOKIE}={urllib.parse.quote(offered)}; Path=/; HttpOnly; SameSite=Strict"
                return self._send(
                    HTTPStatus.SEE_OTHER, b"", "text/plain", head=head, extra={"Location": "/", "Set-Cookie": cookie}
                )
            if not token.matches(self._offered_token()):
                return self._send(
                    HTTPStatus.UNAUTHORIZED,
                    b"a bearer token is required\n",
                    "text/plain",
                    head=head,
                    extra={"WWW-Authenticate": 'Bearer realm="gpu-agent ui"'},
                )
        try:
            if path in ASSETS:
                return self._asset(path, head)
            status, body, ctype, extra = self.server.api.route(path, params)
        except BadRequest as e:
            return self._send(e.status, (str(e) + "\n").encode(), "text/plain", head=head)
        except Exception:
            log.exception("ui: %s failed", self.path)
            return self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", "text/plain", head=head)
        if isinstance(body, Stream):
            return self._stream(status, body, ctype, head, extra)
        if isinstance(body, (dict, list)):
            body = json.dumps(body, separators=(",", ":")).encode()
            ctype = "application/json"
        self._send(status, body, ctype, head=head, extra=extra)

    def _asset(self, path: str, head: bool) -> None:
        name, ctype = ASSETS[path]
        try:
            body = (STATIC / name).read_bytes()
        except OSError:
            hint = b" (run `make ui`)" if name.startswith("vendor/") else b""
            return self._send(
                HTTPStatus.NOT_FOUND, b"not built: " + name.encode() + hint + b"\n", "text/plain", head=head
            )
        self._send(HTTPStatus.OK, body, ctype, head=head)

    def _stream(self, status, body: Stream, ctype: str, head: bool, extra: Optional[dict]) -> None:
        """Store files sent from their fds (api.Stream), never held in memory."""
        try:
            self._headers(status, ctype, body.length, extra)
            if not head and not body.send(self.connection):
                self.close_connection = True  # short of its Content-Length: the client sees it failed
        except OSError as e:  # the client went away (a download cancelled)
            log.debug("ui: %s: %s", self.path, e)
            self.close_connection = True
        finally:
            body.close()

    def _send(self, status, body: bytes, ctype: str, head: bool = False, extra: Optional[dict] = None) -> None:
        self._headers(status, ctype, len(body), extra)
        if not head:
            self.wfile.write(body)

    def _headers(self, status, ctype: str, length: int, extra: Optional[dict]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        # The flame-graph library injects its stylesheet and sets inline styles.
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        )
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()


def serve(
    store_dir: Path,
    listen: str,
    token_file: Optional[str] = None,
    health: Optional[Callable[[], Optional[dict]]] = None,
    warm: bool = True,
) -> UiServer:
    """Start the UI in a thread; returns the server (server.url, server.shutdown()).
    Raises ValueError (a bad address or token file) or OSError (the port)."""
    host, port = parse_listen(listen)
    token = TokenFile.for_option("--ui-token-file", token_file) if token_file else None
    api = Api(Store(store_dir), health=health)
    server = UiServer((host, port), api, token)
    threading.Thread(target=server.serve_forever, name="gpu-agent-ui", daemon=True).start()
    if warm:
        api.start_warming()
    return server


def exposure_error(listen: str, token_file: Optional[str]) -> Optional[str]:
    """Why the UI may not listen there: beyond this host, only with a token."""
    host, _ = parse_listen(listen)
    if is_loopback(host) or token_file:
        return None
    return (
        f"the UI on {listen} would be open to anyone who can reach this host, and profiles "
        "name processes, pods and code: give --ui-token-file"
    )


def wait_forever(stop: Callable[[], bool]) -> None:
    while not stop():
        time.sleep(0.2)
