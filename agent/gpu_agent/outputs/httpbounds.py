"""The agent's HTTP servers (the UI, /metrics) against hostile local clients.

- Bounded: at most MAX_CONNECTIONS requests are handled at once, at most
  PER_PEER_CONNECTIONS from one peer (a local uid, or a remote address); a
  connection beyond either is closed at once and counted. Each connection's socket
  times out after TIMEOUT_S idle, so slow clients cannot hold threads and fds.
- A bearer token, where one is asked for, from a file no other user may read
  (TokenFile).
- Who is on the other end of a loopback connection: its uid, asked of the kernel
  for that one connection (sock_diag's exact lookup by its address pair), so that a
  server can serve root and its own user only, whatever local user connects. Read
  off the whole socket table (/proc/net/tcp) instead, as before, a user who held
  95 250 sockets made every connection cost a scan of the table: root's
  /api/status took 4.2 s instead of 4 ms, and the agent 180 % CPU (issue 44).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import stat
import struct
import threading
from collections import Counter
from typing import Optional

from ..system.safe_open import trusted_uids

MAX_CONNECTIONS = 32
PER_PEER_CONNECTIONS = 8
TIMEOUT_S = 10.0
MAX_TOKEN = 4096  # bytes of a token file read


# sock_diag (linux/sock_diag.h, linux/inet_diag.h): one request, one reply. Written
# here rather than through pyroute2, whose 0.9 sockets each run an asyncio loop: a
# fixed request and reply of the kernel's ABI, checked field by field below.
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFFFFFFFFFF
_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, ext, pad, states; then the socket's id: sport,
# dport (network order: htons), src, dst (network order), if, cookie
_REQ = struct.Struct("=BBBxIHH16s16sIQ")
# inet_diag_msg: family, state, timer, retrans; the socket's id as above; expires,
# rqueue, wqueue, uid, inode
_MSG = struct.Struct("=BBBBHH16s16sIQIIIII")
DIAG_TIMEOUT_S = 1.0


def _diag_uid(family: int, client, server) -> Optional[int]:
    """The uid owning the TCP socket whose own end is `client` (ip, port) and whose
    other end is `server`, by the kernel's exact lookup (one hash probe); None if
    there is none."""
    (cip, cport), (sip, sport) = client, server
    req = _REQ.pack(
        family,
        socket.IPPROTO_TCP,
        0,
        0xFFFFFFFF,  # any state
        socket.htons(cport),
        socket.htons(sport),
        cip.packed.ljust(16, b"\0"),
        sip.packed.ljust(16, b"\0"),
        0,
        INET_DIAG_NOCOOKIE,
    )
    msg = _NLMSGHDR.pack(_NLMSGHDR.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(DIAG_TIMEOUT_S)
        nl.sendto(msg, (0, 0))
        reply = nl.recv(8192)
    if len(reply) < _NLMSGHDR.size:
        return None
    length, kind, _, seq, _ = _NLMSGHDR.unpack_from(reply)
    if kind != SOCK_DIAG_BY_FAMILY or seq != 1 or length < _NLMSGHDR.size + _MSG.size or len(reply) < length:
        return None  # NLMSG_ERROR: no such socket (ENOENT), or the kernel refused
    fam, _, _, _, sp, dp, src, dst, _, _, _, _, _, uid, _ = _MSG.unpack_from(reply, _NLMSGHDR.size)
    n = len(cip.packed)
    if (fam, socket.ntohs(sp), socket.ntohs(dp), src[:n], dst[:n]) != (family, cport, sport, cip.packed, sip.packed):
        return None
    return uid


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
        family = socket.AF_INET6 if cip.version == 6 else socket.AF_INET
        uid = _diag_uid(family, (cip, client[1]), (sip, local[1]))
        if uid is not None:
            return uid
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


class TokenFile:
    """A bearer token that every request must carry (the UI's --ui-token-file, /metrics'
    --metrics-token-file), re-read when its file changes (rotated without a restart)."""

    def __init__(self, path: str):
        self.path = path
        self._stamp = None
        self._token = b""
        self._lock = threading.Lock()
        self.current()  # an unreadable or empty file fails at start, not at the first request

    @classmethod
    def for_option(cls, flag: str, path: str) -> "TokenFile":
        """The token file a command-line flag names; ValueError naming the flag if it is
        unreadable, empty, or another user's to read or swap."""
        try:
            return cls(path)
        except OSError as e:
            raise ValueError(f"{flag}: cannot read {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None

    def current(self) -> bytes:
        with self._lock:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                token = self._read()
                if not token:
                    raise ValueError(f"{self.path} is empty")
                self._token, self._stamp = token, stamp
            return self._token

    def _read(self) -> bytes:
        """The token, only from a regular file of root's, this user's or the user's who
        ran this through sudo, that no one else may read or write (issue 44: a 0644
        token was taken), opened without blocking (a FIFO there stalled every request
        under the lock)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{self.path} is not a regular file")
            if st.st_uid not in trusted_uids() or st.st_mode & 0o077:
                raise ValueError(
                    f"{self.path} must be root's, this user's or sudo's invoker's, and no one else's "
                    "(chmod 600; a Kubernetes secret: defaultMode 0400)"
                )
            return os.read(fd, MAX_TOKEN + 1)[:MAX_TOKEN].strip()
        finally:
            os.close(fd)

    def matches(self, offered: str) -> bool:
        try:
            token = self.current()
        except (OSError, ValueError):
            return False  # a token file that went away lets nobody in
        return bool(offered) and hmac.compare_digest(offered.encode(), token)
