"""In-process gRPC backends for the streaming tests, built from the same .proto
modules the agent sends with: Parca's ProfileStoreService (our committed
parca_profilestore_pb2*) and OTLP's ProfilesService (opentelemetry-proto).

Each received request is decoded by grpc with the real message classes and
kept; a bearer token is checked when one is configured; TLS uses a throwaway
CA made with the openssl CLI.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Optional

import grpc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as otlp_svc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as otlp_grpc

from gpu_agent.proto import parca_profilestore_pb2 as parca_pb
from gpu_agent.proto import parca_profilestore_pb2_grpc as parca_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder:
    def __init__(self, token: Optional[str] = None):
        self.token = token
        self.parca: list = []  # WriteRawRequest
        self.otlp: list = []  # ExportProfilesServiceRequest
        self.auth_failures = 0
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)

    def check(self, context) -> None:
        if self.token is None:
            return
        md = dict(context.invocation_metadata())
        if md.get("authorization") != f"Bearer {self.token}":
            with self.lock:
                self.auth_failures += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad or missing bearer token")

    def wait(self, pred, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        with self.cv:
            while not pred(self):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
            return True


class _Parca(parca_grpc.ProfileStoreServiceServicer):
    def __init__(self, rec: Recorder):
        self.rec = rec

    def WriteRaw(self, request, context):
        self.rec.check(context)
        with self.rec.cv:
            self.rec.parca.append(request)
            self.rec.cv.notify_all()
        return parca_pb.WriteRawResponse()


class _Otlp(otlp_grpc.ProfilesServiceServicer):
    def __init__(self, rec: Recorder):
        self.rec = rec

    def Export(self, request, context):
        self.rec.check(context)
        with self.rec.cv:
            self.rec.otlp.append(request)
            self.rec.cv.notify_all()
        return otlp_svc.ExportProfilesServiceResponse()


class Backend:
    """Both services on one port; stop() and start() again on the same port."""

    def __init__(
        self, port: Optional[int] = None, token: Optional[str] = None, tls: Optional[tuple[bytes, bytes]] = None
    ):
        self.port = port or free_port()
        self.rec = Recorder(token)
        self.tls = tls  # (cert chain PEM, key PEM)
        self.server = None

    def start(self) -> "Backend":
        s = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        parca_grpc.add_ProfileStoreServiceServicer_to_server(_Parca(self.rec), s)
        otlp_grpc.add_ProfilesServiceServicer_to_server(_Otlp(self.rec), s)
        addr = f"127.0.0.1:{self.port}"
        if self.tls:
            creds = grpc.ssl_server_credentials([(self.tls[1], self.tls[0])])
            bound = s.add_secure_port(addr, creds)
        else:
            bound = s.add_insecure_port(addr)
        assert bound == self.port, f"could not bind {addr}"
        s.start()
        self.server = s
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0).wait()
            self.server = None


def make_ca(d: Path, hostname: str = "localhost") -> dict:
    """A throwaway CA and a server certificate for hostname and 127.0.0.1."""
    d.mkdir(parents=True, exist_ok=True)

    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    ossl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=gpu-agent test CA",
    )
    ossl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        f"/CN={hostname}",
    )
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{hostname},IP:127.0.0.1\n")
    ossl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return {"ca": d / "ca.crt", "cert": (d / "server.crt").read_bytes(), "key": (d / "server.key").read_bytes()}
