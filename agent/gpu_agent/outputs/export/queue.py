"""Bounded send queue with one sender thread.

The agent's loop never waits for a backend: it puts encoded requests (bytes)
here and goes on profiling. The sender thread sends the oldest request; a
failure is classified from its gRPC status:

  transient (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ...): the
      request stays at the head and is retried after an exponential backoff
      with jitter (initial * 2^n, capped, then a random 50-100 % of that);
  auth (UNAUTHENTICATED / PERMISSION_DENIED, i.e. HTTP 401 / 403): logged once,
      clearly, and retried only after the maximum backoff (never hot): a
      rotated token file is picked up on that retry;
  permanent (INVALID_ARGUMENT, UNIMPLEMENTED, ...): the request is dropped and
      counted (reason "rejected"); retrying would fail the same way.

Memory is bounded by max_items and max_bytes. When full, the policy decides:
  drop-oldest   (default) the oldest queued request is dropped (reason "queue_full");
  backpressure  has_room() is False: the agent stops closing windows and stops
                reading the BPF maps, which keep aggregating in the kernel;
                put() still never exceeds the bounds.
Every dropped request is counted by reason; none is dropped silently.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

log = logging.getLogger("gpu_agent.export")

POLICIES = ("drop-oldest", "backpressure")

TRANSIENT_CODES = {
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "ABORTED",
    "INTERNAL",
    "UNKNOWN",
    "CANCELLED",
    "DATA_LOSS",
}
AUTH_CODES = {"UNAUTHENTICATED", "PERMISSION_DENIED"}


class SendError(Exception):
    """A failed send: code is a gRPC status name (or another short reason)."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


@dataclass
class QueueStats:
    sent: int = 0
    sent_bytes: int = 0
    retries: int = 0
    failures: dict = field(default_factory=dict)  # gRPC code -> count of failed attempts
    dropped: dict = field(default_factory=dict)  # reason -> requests dropped
    depth: int = 0
    queued_bytes: int = 0
    max_depth_seen: int = 0
    last_success: float = 0.0  # unix time


def classify(code: str) -> str:
    if code in AUTH_CODES:
        return "auth"
    if code in TRANSIENT_CODES:
        return "transient"
    return "permanent"


class SendQueue:
    """max_items / max_bytes bound the requests waiting; one more may be in flight."""

    def __init__(
        self,
        name: str,
        send: Callable[[bytes], None],
        *,
        max_items: int = 32,
        max_bytes: int = 64 << 20,
        policy: str = "drop-oldest",
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        rng: Optional[random.Random] = None,
    ):
        if policy not in POLICIES:
            raise ValueError(f"unknown queue policy {policy!r} (one of {', '.join(POLICIES)})")
        if max_items < 1 or max_bytes < 1:
            raise ValueError("queue bounds must be positive")
        self.name = name
        self._send = send
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.policy = policy
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self._rng = rng or random.Random()
        self._items: collections.deque[bytes] = collections.deque()
        self._bytes = 0
        self._inflight: Optional[bytes] = None
        self._cv = threading.Condition()
        self._closing = False
        self._stop = False
        self._attempt = 0  # consecutive failures of the in-flight request
        self._failing_since: Optional[float] = None
        self._auth_logged = False
        self._permanent_logged: set[str] = set()
        self._last_fail_log = 0.0
        self.stats = QueueStats()
        self._thread = threading.Thread(target=self._run, name=f"export-{name}", daemon=True)
        self._thread.start()

    # -- producer side (agent loop) ----------------------------------------
    def has_room(self, size: int = 0) -> bool:
        with self._cv:
            return len(self._items) < self.max_items and self._bytes + size <= self.max_bytes

    def put(self, item: bytes) -> bool:
        """Queue one encoded request. Returns False if it or an older one was dropped."""
        with self._cv:
            if len(item) > self.max_bytes:
                self._drop("too_large")
                return False
            ok = True
            while self._items and (len(self._items) >= self.max_items or self._bytes + len(item) > self.max_bytes):
                self._bytes -= len(self._items.popleft())
                self._drop("queue_full")
                ok = False
            self._items.append(item)
            self._bytes += len(item)
            self._update_depth()
            self._cv.notify_all()
            return ok

    def snapshot(self) -> QueueStats:
        with self._cv:
            s = self.stats
            return QueueStats(
                s.sent,
                s.sent_bytes,
                s.retries,
                dict(s.failures),
                dict(s.dropped),
                s.depth,
                s.queued_bytes,
                s.max_depth_seen,
                s.last_success,
            )

    def close(self, flush_timeout: float = 5.0) -> None:
        """Try to send what is queued for up to flush_timeout, then count the rest as dropped."""
        deadline = time.monotonic() + max(0.0, flush_timeout)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
            while (self._items or self._inflight is not None) and time.monotonic() < deadline:
                self._cv.wait(timeout=0.05)
            self._stop = True
            while self._items:
                self._bytes -= len(self._items.popleft())
                self._drop("shutdown")
            if self._inflight is not None:
                self._inflight = None
                self._drop("shutdown")
            self._update_depth()
            self._cv.notify_all()
        self._thread.join(timeout=1.0)

    # -- internals -----------------------------------------------------------
    def _drop(self, reason: str) -> None:
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1

    def _update_depth(self) -> None:
        self.stats.depth = len(self._items) + (self._inflight is not None)
        self.stats.queued_bytes = self._bytes + len(self._inflight or b"")
        self.stats.max_depth_seen = max(self.stats.max_depth_seen, self.stats.depth)

    def backoff(self, attempt: int) -> float:
        """Delay before retry number `attempt` (1-based): capped exponential, 50-100 % jitter."""
        cap = min(self.backoff_max, self.backoff_initial * (2 ** min(attempt - 1, 30)))
        return cap * (0.5 + 0.5 * self._rng.random())

    def _wait(self, seconds: float) -> bool:
        """Sleep up to `seconds` (at most 0.5 s more once closing); False when stopping."""
        end = time.monotonic() + seconds
        with self._cv:
            while not self._stop:
                if self._closing:
                    end = min(end, time.monotonic() + 0.5)
                left = end - time.monotonic()
                if left <= 0:
                    return True
                self._cv.wait(timeout=left)
            return False

    def _next(self) -> Optional[bytes]:
        """The request to (re)send: the in-flight one, unless newer ones fill the queue
        under drop-oldest, in which case the stale in-flight one is dropped first."""
        with self._cv:
            while self._inflight is None and not self._items and not self._stop:
                self._cv.wait()
            if self._stop:
                return None
            if self._inflight is not None and self.policy == "drop-oldest" and len(self._items) >= self.max_items:
                self._inflight = None
                self._attempt = 0
                self._drop("queue_full")
            if self._inflight is None:
                self._inflight = self._items.popleft()
                self._bytes -= len(self._inflight)
            self._update_depth()
            return self._inflight

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            try:
                self._send(item)
            except SendError as e:
                if not self._failed(e):
                    return
                continue
            except Exception as e:  # an unexpected transport error: treat as transient
                if not self._failed(SendError("UNKNOWN", f"{type(e).__name__}: {e}")):
                    return
                continue
            with self._cv:
                if self._inflight is item:
                    self._inflight = None
                self.stats.sent += 1
                self.stats.sent_bytes += len(item)
                self.stats.last_success = time.time()
                self._update_depth()
                self._cv.notify_all()
            if self._failing_since is not None:
                log.warning(
                    "%s: sending again after %.1fs of failures (dropped so far: %s)",
                    self.name,
                    time.monotonic() - self._failing_since,
                    _fmt(self.stats.dropped) or "none",
                )
                self._failing_since = None
                self._auth_logged = False
            self._attempt = 0

    def _failed(self, e: SendError) -> bool:
        kind = classify(e.code)
        now = time.monotonic()
        with self._cv:
            self.stats.failures[e.code] = self.stats.failures.get(e.code, 0) + 1
            if kind == "permanent":
                if self._inflight is not None:
                    self._inflight = None
                    self._drop("rejected")
                    self._update_depth()
                    self._cv.notify_all()
                self._attempt = 0
        if kind == "permanent":
            if e.code not in self._permanent_logged:
                self._permanent_logged.add(e.code)
                log.error("%s: the backend rejected a profile (%s); dropped, not retried", self.name, e)
            return not self._stop
        if self._failing_since is None:
            self._failing_since = now
        self._attempt += 1
        self.stats.retries += 1
        if kind == "auth":
            if not self._auth_logged:
                self._auth_logged = True
                log.error(
                    "%s: authentication failed (%s): check --bearer-token-file and the "
                    "backend's credentials. Retrying every %.0fs (the token file is "
                    "re-read); profiles wait in the bounded queue meanwhile",
                    self.name,
                    e,
                    self.backoff_max,
                )
            delay = self.backoff_max
        else:
            if self._attempt == 1 or now - self._last_fail_log >= 60:
                self._last_fail_log = now
                log.warning(
                    "%s: send failed (%s); retrying with backoff (queue %d/%d)",
                    self.name,
                    e,
                    self.stats.depth,
                    self.max_items,
                )
            delay = self.backoff(self._attempt)
        return self._wait(delay)


def _fmt(d: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()) if v)
