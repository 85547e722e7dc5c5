"""The agent's HTTP servers (the UI, /metrics) against hostile local clients.

- Bounded: at most MAX_CONNECTIONS requests are handled at once, at most
  PER_PEER_CONNECTIONS from one peer (a local uid, or a remote address); a
  connection beyond either is closed at once and counted. Each connection's socket
  times out after TIMEOUT_S idle, so slow clients cannot hold threads and fds.
- Who is on the other end of a loopback connection: its uid, read from the
  kernel's socket table (/proc/net/tcp, tcp6), so that a server can serve root
  and its own user only, whatever local user connects.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import Counter
from typing import Optional

MAX_CONNECTIONS = 32
PER_PEER_CONNECTIONS = 8
TIMEOUT_S = 10.0


def _hex_addr(ip, port: int) -> str:
    """An address as /proc/net/tcp{,6} writes it (each 32-bit word little-endian)."""
    packed = ip.packed
    words = "".join(packed[i : i + 4][::-1].hex().upper() for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def _ip(text: str):
    return ipaddress.ip_address(text.split("%", 1)[0])


def loopback_peer_uid(client: tuple, local: tuple) -> Optional[int]:
    """The uid owning the client end of a loopback TCP connection (None: not found).
    client: the peer's (ip, port, ...); local: the accepted socket's own address."""
    c, s = _ip(client[0]), _ip(local[0])
    forms = [(c, s)]
    if c.version == 6 and c.ipv4_mapped is not None:  # a v4 client of a dual-stack socket
        forms.append((c.ipv4_mapped, s.ipv4_mapped or ipaddress.ip_address("127.0.0.1")))
    for cip, sip in forms:
        want = (_hex_addr(cip, client[1]), _hex_addr(sip, local[1]))
        try:
            with open("/proc/net/tcp6" if cip.version == 6 else "/proc/net/tcp") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) >= 8 and (fields[1], fields[2]) == want:
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def is_loopback(text: str) -> bool:
    try:
        ip = _ip(text)
    except ValueError:
        return False
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def peer_of(request, client_address: tuple) -> object:
    """Who is connecting, for the per-peer bound: a local client's uid, else its address."""
    if is_loopback(client_address[0]):
        try:
            uid = loopback_peer_uid(client_address, request.getsockname())
        except OSError:
            uid = None
        if uid is not None:
            return ("uid", uid)
    return ("addr", client_address[0])


class BoundedThreads:
    """A socketserver mixin (listed before ThreadingMixIn's server class): bounded
    threads. A handler asks server.peer() who its client is (peer_of's key)."""

    max_connections = MAX_CONNECTIONS
    per_peer = PER_PEER_CONNECTIONS
    timeout_s = TIMEOUT_S

    def _bounds(self):
        b = self.__dict__.get("_bounds_state")
        if b is None:
            b = self.__dict__["_bounds_state"] = {"lock": threading.Lock(), "active": Counter(), "n": 0, "refused": 0}
        return b

    @property
    def refused_connections(self) -> int:
        return self._bounds()["refused"]

    def process_request(self, request, client_address):
        b = self._bounds()
        key = peer_of(request, client_address)
        with b["lock"]:
            ok = b["n"] < self.max_connections and b["active"][key] < self.per_peer
            if ok:
                b["n"] += 1
                b["active"][key] += 1
            else:
                b["refused"] += 1
        if not ok:
            self.shutdown_request(request)
            return
        request.settimeout(self.timeout_s)
        try:
            super().process_request(request, (client_address, key))
        except Exception:
            self._release(key)
            raise

    def _release(self, key) -> None:
        b = self._bounds()
        with b["lock"]:
            b["n"] -= 1
            b["active"][key] -= 1
            if b["active"][key] <= 0:
                del b["active"][key]

    def process_request_thread(self, request, address):
        client_address, key = address
        _current.peer = key
        try:
            super().process_request_thread(request, client_address)
        finally:
            _current.peer = None
            self._release(key)

    def peer(self) -> object:
        """The peer of the request this thread handles."""
        return getattr(_current, "peer", None)


_current = threading.local()
