"""grpc[s]://HOST:PORT -> a gRPC channel, TLS options and a bearer token.

TLS (grpcs://) verifies the server against the system CA bundle (the first of
the usual distribution paths that exists; gRPC's bundled roots if none does)
or --ca-file. --insecure-skip-verify keeps TLS but accepts any certificate:
gRPC's Python API cannot switch verification off, so the channel goes through
a small in-process forwarder that speaks TLS (ALPN h2, no verification) to
the server and plaintext HTTP/2 to gRPC on 127.0.0.1.

The bearer token file is re-read whenever it changes (Kubernetes rotates
projected service-account tokens), and sent as `authorization: Bearer ...`.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

log = logging.getLogger("gpu_agent.export")

SYSTEM_CA_FILES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  # RHEL 7+
    "/etc/ssl/cert.pem",  # Alpine, macOS
)


@dataclass(frozen=True)
class Endpoint:
    tls: bool
    host: str
    port: int

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.target}"


def parse_endpoint(text: str) -> Endpoint:
    """'grpc://host:port' or 'grpcs://host:port' (IPv6 in brackets)."""
    u = urlsplit(text.strip())
    if u.scheme not in ("grpc", "grpcs"):
        raise ValueError(f"{text!r}: expected grpc://HOST:PORT or grpcs://HOST:PORT")
    if u.path not in ("", "/") or u.query or u.fragment or u.username:
        raise ValueError(f"{text!r}: only grpc[s]://HOST:PORT is accepted (no path, no user)")
    try:
        port = u.port
    except ValueError:
        port = None
    if not u.hostname or port is None:
        raise ValueError(f"{text!r}: HOST and PORT are required, e.g. grpcs://parca.example:443")
    return Endpoint(u.scheme == "grpcs", u.hostname, port)


def system_ca_bundle() -> Optional[bytes]:
    cands = [os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile, *SYSTEM_CA_FILES]
    for path in cands:
        if path and os.path.isfile(path):
            with open(path, "rb") as f:
                return f.read()
    return None


class TokenFile:
    """A bearer token read from a file, re-read when the file changes."""

    def __init__(self, path: str):
        self.path = path
        self._key: Optional[tuple] = None
        self._token = ""
        self.read()  # fail at startup, not at the first send

    def read(self) -> str:
        st = os.stat(self.path)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._key:
            with open(self.path) as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"bearer token file {self.path} is empty")
            self._token, self._key = token, key
        return self._token


@dataclass
class TransportOptions:
    ca_file: Optional[str] = None
    insecure_skip_verify: bool = False
    bearer_token_file: Optional[str] = None
    timeout_s: float = 10.0
    reconnect_max_s: float = 10.0


class Transport:
    """A gRPC channel to one endpoint plus the per-call metadata and timeout."""

    def __init__(self, endpoint: Endpoint, opts: TransportOptions):
        import grpc

        self.endpoint = endpoint
        self.opts = opts
        self.token = TokenFile(opts.bearer_token_file) if opts.bearer_token_file else None
        if self.token is not None and not endpoint.tls:
            log.warning("%s: the bearer token is sent over plaintext gRPC; use grpcs://", endpoint)
        channel_opts = [
            ("grpc.enable_retries", 0),  # retries are the queue's job (backoff, drop policy)
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", int(opts.reconnect_max_s * 1000)),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.primary_user_agent", "gpu-agent"),
        ]
        self._forwarder: Optional[_TlsForwarder] = None
        if not endpoint.tls:
            self.channel = grpc.insecure_channel(endpoint.target, options=channel_opts)
        elif opts.insecure_skip_verify:
            log.warning("%s: --insecure-skip-verify: the server's certificate is NOT verified", endpoint)
            self._forwarder = _TlsForwarder(endpoint.host, endpoint.port)
            channel_opts.append(("grpc.default_authority", endpoint.target))
            self.channel = grpc.insecure_channel(self._forwarder.target, options=channel_opts)
        else:
            if opts.ca_file:
                with open(opts.ca_file, "rb") as f:
                    roots = f.read()
            else:
                roots = system_ca_bundle()
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self.channel = grpc.secure_channel(endpoint.target, creds, options=channel_opts)

    def metadata(self) -> list[tuple[str, str]]:
        if self.token is None:
            return []
        return [("authorization", "Bearer " + self.token.read())]

    def unary(self, method: str, response_deserializer):
        """A callable(request_bytes) that raises SendError with the gRPC status name."""
        import grpc

        from .queue import SendError

        rpc = self.channel.unary_unary(method, request_serializer=None, response_deserializer=response_deserializer)

        def call(request: bytes):
            try:
                md = self.metadata()
            except (OSError, ValueError) as e:
                raise SendError("UNAUTHENTICATED", f"cannot read bearer token: {e}") from None
            try:
                return rpc(request, timeout=self.opts.timeout_s, metadata=md)
            except grpc.RpcError as e:
                code = e.code().name if hasattr(e, "code") and e.code() else "UNKNOWN"
                detail = e.details() if hasattr(e, "details") else str(e)
                raise SendError(code, detail or "") from None

        return call

    def close(self) -> None:
        self.channel.close()
        if self._forwarder is not None:
            self._forwarder.close()


class _TlsForwarder:
    """127.0.0.1:ephemeral (plaintext) -> host:port (TLS, certificate not verified)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE
        self._ctx.set_alpn_protocols(["h2"])
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(16)
        self.target = f"127.0.0.1:{self._srv.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, name="tls-forwarder", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                cli, _ = self._srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(cli,), daemon=True).start()

    def _serve(self, cli: socket.socket) -> None:
        try:
            raw = socket.create_connection((self.host, self.port), timeout=10)
            up = self._ctx.wrap_socket(raw, server_hostname=self.host)
            up.settimeout(None)
        except OSError:
            cli.close()
            return
        t = threading.Thread(target=_pipe, args=(up, cli), daemon=True)
        t.start()
        _pipe(cli, up)
        t.join(timeout=5)

    def close(self) -> None:
        self._closed = True
        try:
            self._srv.close()
        except OSError:
            pass


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
