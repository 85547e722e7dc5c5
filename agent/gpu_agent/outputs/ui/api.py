"""The UI's routes over one store, independent of HTTP: route(path, params) answers
(status, body, content type, extra headers). Times are milliseconds since the epoch
(what a browser's Date holds); a range (from, to] holds the windows that ended in it.

  /api/status      the store (files, span, bytes) and, under `run --ui`, the agent's health
  /api/intervals   GPU time and launches per interval (bucketed), for the range chart
  /api/range       the merged range: flame graph tree, top table, filter menus
                   (lines=1: frames split by source line, as pprof's -lines)
  /api/diff        two ranges: the later one's tree coloured by the change, and the changes
  /api/traces      the Perfetto traces in the range (record/trace --store), for the Timeline tab
  /api/timeline    one trace's rows (process, GPU, stream), kernel names and counts (ui/timeline.py)
  /api/timeline/view   a span of it: its kernels when few, else per-row buckets (busy, counts, marks)
  /api/timeline/stack  one launch stack of it, as text (the tooltip's)
  /download/profile.pb.gz          the merged range as one pprof (filters applied)
  /download/trace.perfetto-trace   the range's Perfetto traces, where the store has them
  /files/NAME      one store file as it is

A download and /files send store files as they are, never holding one in memory
(Stream); everything else reads a store file only up to a bound (profiles.py,
timeline.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from http import HTTPStatus
from typing import Callable, Optional

from .profiles import ProfileCache
from .query import VALUE_INDEX, Filters, Merged, changes, parse_filters, sandwich, scaled, tree_of
from .workers import DecodePool
from ...profile.store import PROFILE_SUFFIX, TRACE_SUFFIX, Store, range_name
from .timeline import MAX_BUCKETS, MAX_BYTES as MAX_TRACE_BYTES, MAX_SPAN_NS, Trace, TraceCache, TraceError, parse_trace

MAX_BARS = 360  # the chart's bars; longer ranges sum neighbouring intervals
WARM_PAUSE_S = 5.0  # how often the warmer looks for new windows
log = logging.getLogger("gpu_agent.ui")


class Stream:
    """A response body of store files, sent from the files as they are (sendfile(2)),
    one after another, never read into memory: /files of a 2 GiB sparse file took the
    UI to 4.24 GB, and the trace download joined every trace of the range in memory
    (issue 44). Each file is opened without following a link and checked a regular
    file on the open fd (Store.open); its fstat gives its size, and exactly that many
    bytes of it are sent (a file that grows is cut there). keep_open holds each file
    open from here to the send (one file: /files); otherwise each is opened again
    when its turn comes (a download of many traces holds one fd), and must be the
    same file (device, inode) with at least that size, or the response stops short of
    its Content-Length, which the client sees as a failed download."""

    def __init__(self, store: Store, names: list[str], keep_open: bool):
        self.store = store
        self.parts: list[list] = []  # [name, size, (dev, ino), fd or None]
        for name in names:
            opened = store.open(name)
            if opened is None:
                continue  # rotated away or not a regular file: left out, as before
            fd, st = opened
            if not keep_open:
                os.close(fd)
                fd = None
            self.parts.append([name, st.st_size, (st.st_dev, st.st_ino), fd])
        self.length = sum(p[1] for p in self.parts)

    def send(self, sock) -> bool:
        """Every part to the socket; False if one could not be sent whole (the caller
        closes the connection). Closes what it opened."""
        try:
            for part in self.parts:
                name, size, ident, fd = part
                part[3] = None
                if fd is None:
                    opened = self.store.open(name)
                    if opened is None:
                        log.warning("ui: %s went away during its download", name)
                        return False
                    fd, st = opened
                    if (st.st_dev, st.st_ino) != ident or st.st_size < size:
                        os.close(fd)
                        log.warning("ui: %s was replaced during its download", name)
                        return False
                with os.fdopen(fd, "rb") as f:
                    if size and sock.sendfile(f, 0, size) != size:  # count 0 would mean "to EOF"
                        log.warning("ui: %s shrank while it was sent", name)
                        return False
            return True
        finally:
            self.close()

    def close(self) -> None:
        for part in self.parts:
            if part[3] is not None:
                os.close(part[3])
                part[3] = None


class BadRequest(Exception):
    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


def _ms(params: dict, name: str, default: Optional[int] = None) -> int:
    raw = (params.get(name) or [""])[-1].strip()
    if raw == "":
        if default is None:
            raise BadRequest(f"missing {name} (milliseconds since the epoch)")
        return default
    try:
        return int(float(raw))
    except ValueError:
        raise BadRequest(f"{name}: expected milliseconds since the epoch, got {raw!r}") from None


def _int(params: dict, name: str, default: int, lo: int, hi: int, what: str) -> int:
    """An integer parameter in [lo, hi], or one 400 line that says what it wants."""
    raw = (params.get(name) or [""])[-1].strip()
    if raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise BadRequest(f"{name}: expected {what}, got {raw[:40]!r}") from None
    if not lo <= v <= hi:
        raise BadRequest(f"{name}: expected {what} in [{lo}, {hi}], got {v}")
    return v


def _flag(params: dict, name: str) -> bool:
    return (params.get(name) or ["0"])[-1] in ("1", "true", "on")


def _value(params: dict) -> int:
    name = (params.get("type") or ["gpu_time"])[-1]
    if name not in VALUE_INDEX:
        raise BadRequest(f"type: expected one of {', '.join(VALUE_INDEX)}")
    return VALUE_INDEX[name]


class Api:
    def __init__(
        self, store: Store, health: Optional[Callable[[], Optional[dict]]] = None, cache: Optional[ProfileCache] = None
    ):
        self.store = store
        self.cache = cache or ProfileCache(store)
        self.health = health
        self._stop = threading.Event()
        self.warmed = 0  # files decoded by the warmer
        self.warm_done_at: Optional[float] = None
        self.started_at = time.monotonic()
        self._requests = 0  # in flight; the warmer waits for them
        self._requests_lock = threading.Lock()
        self.traces_parsed = TraceCache()
        self.warmed_trace: Optional[str] = None

    # -- the warmer -----------------------------------------------------------
    def start_warming(self, pool: bool = True) -> None:
        """The warmer, and (pool) the processes that decode a range's files (workers.py)."""
        if pool and self.cache.pool is None:
            self.cache.pool = DecodePool(self.store)
            self.cache.pool.start()
        threading.Thread(target=self._warm, name="gpu-agent-ui-warm", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.cache.pool is not None:
            self.cache.pool.close()

    def _warm(self) -> None:
        """Decode the store newest first until the cache is full, then each new window
        as it lands (the least recently used rows make room). Opening a range then
        merges decoded rows instead of reading hundreds of files while the user waits
        (docs/benchmarks.md)."""
        newest_seen = None
        while not self._stop.is_set():
            profiles = self.store.profiles()
            for f in reversed(profiles):
                if self._stop.is_set():
                    return
                if newest_seen is not None and f.end_ns <= newest_seen:
                    break  # read on an earlier pass
                if newest_seen is None and self.cache.full():
                    break
                while self._requests and not self._stop.is_set():
                    self._stop.wait(0.05)  # a user waits on a request: it gets the CPU
                if not self.cache.cached(f) and self.cache.get(f) is not None:
                    self.warmed += 1
            if profiles:
                newest_seen = max(newest_seen or 0, profiles[-1].end_ns)
            self.cache.forget_gone(profiles)
            if self.warm_done_at is None:
                self.warm_done_at = time.monotonic()
            self._warm_trace()
            self._stop.wait(WARM_PAUSE_S)

    def _warm_trace(self) -> None:
        """The newest trace parsed before the Timeline tab asks for it (the tab opens
        on it): 250 000 kernels take about 2 s to parse here."""
        traces = self.store.traces()
        if not traces or traces[-1].name == self.warmed_trace:
            return
        self.warmed_trace = traces[-1].name
        try:
            self.trace({"file": [self.warmed_trace]})
        except BadRequest:
            pass  # said when the page asks for it

    # -- routes ---------------------------------------------------------------
    def route(self, path: str, params: dict):
        with self._requests_lock:
            self._requests += 1
        try:
            return self._route(path, params)
        finally:
            with self._requests_lock:
                self._requests -= 1

    def _route(self, path: str, params: dict):
        if path == "/api/status":
            return HTTPStatus.OK, self.status(), "application/json", None
        if path == "/api/intervals":
            return HTTPStatus.OK, self.intervals(params), "application/json", None
        if path == "/api/range":
            return HTTPStatus.OK, self.range(params), "application/json", None
        if path == "/api/diff":
            return HTTPStatus.OK, self.diff(params), "application/json", None
        if path == "/api/sandwich":
            return HTTPStatus.OK, self.sandwich(params), "application/json", None
        if path == "/api/traces":
            return HTTPStatus.OK, self.traces(params), "application/json", None
        if path == "/api/timeline":
            return HTTPStatus.OK, self.trace(params).meta(), "application/json", None
        if path == "/api/timeline/view":
            return HTTPStatus.OK, self.timeline_view(params), "application/json", None
        if path == "/api/timeline/stack":
            return HTTPStatus.OK, self.timeline_stack(params), "application/json", None
        if path == "/download/profile.pb.gz":
            return self.download_profile(params)
        if path == "/download/trace.perfetto-trace":
            return self.download_trace(params)
        if path.startswith("/files/"):
            return self.file(path[len("/files/") :])
        raise BadRequest("not found", HTTPStatus.NOT_FOUND)

    def status(self) -> dict:
        store = self.store.summary()
        agent = None
        if self.health is not None:
            try:
                agent = self.health()
            except Exception as e:  # the page still shows the store
                agent = {"error": str(e)}
        return {
            "store": store,
            "agent": agent,
            "agent_attached": self.health is not None,
            "ui": {
                "cached_files": self.cache.size(),
                "cached_rows": self.cache.rows(),
                "warmed_files": self.warmed,
                "warm_seconds": (None if self.warm_done_at is None else round(self.warm_done_at - self.started_at, 2)),
                "unreadable": self.cache.unreadable_latest(20),
                "unreadable_files": self.cache.unreadable_total,
                "parsed_traces": len(self.traces_parsed),
            },
            "now_ms": int(time.time() * 1000),
        }

    def _files(self, params: dict, prefix: str = ""):
        profiles = self.store.profiles()
        last_ms = profiles[-1].end_ns // 1_000_000 + 1 if profiles else int(time.time() * 1000)
        to_ms = _ms(params, prefix + "to", last_ms)
        # By default the last hour, or the whole store when it is younger.
        first_ms = profiles[0].end_ns // 1_000_000 - 1 if profiles else to_ms - 3_600_000
        from_ms = _ms(params, prefix + "from", max(to_ms - 3_600_000, min(first_ms, to_ms - 1)))
        if from_ms >= to_ms:
            raise BadRequest(f"{prefix}from must be before {prefix}to")
        files = self.store.in_range(from_ms * 1_000_000, to_ms * 1_000_000)
        return from_ms, to_ms, files

    def traces(self, params: dict) -> dict:
        from_ms, to_ms, _ = self._files(params)
        traces = self.store.in_range(from_ms * 1_000_000, to_ms * 1_000_000, traces=True)
        return {
            "from": from_ms,
            "to": to_ms,
            "traces": [{"name": f.name, "end": f.end_ns // 1_000_000, "bytes": f.size} for f in traces],
        }

    def trace(self, params: dict) -> Trace:
        """The trace file= names, parsed once (TraceCache, keyed by the opened file's
        identity, so a trace rewritten in place is read again)."""
        name = (params.get("file") or [""])[-1]
        if not name.endswith(TRACE_SUFFIX):
            raise BadRequest("file= names a trace of the store (gpu-….perfetto-trace)", HTTPStatus.NOT_FOUND)
        if not any(t.name == name for t in self.store.traces()):
            raise BadRequest(f"no trace {name!r} in the store", HTTPStatus.NOT_FOUND)
        opened = self.store.open(name)
        if opened is None:
            raise BadRequest(f"{name} cannot be read", HTTPStatus.NOT_FOUND)
        fd, st = opened
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_TRACE_BYTES:  # said before reading it
                raise BadRequest(
                    f"{name} is {st.st_size >> 20} MiB, more than the page reads "
                    f"({MAX_TRACE_BYTES >> 20} MiB): download it for ui.perfetto.dev"
                )
            key = (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            try:
                # grown since the fstat: more than MAX_TRACE_BYTES is refused by the parse
                return self.traces_parsed.get(key, lambda: parse_trace(f.read(MAX_TRACE_BYTES + 1), name))
            except TraceError as e:
                raise BadRequest(f"{name}: {e}") from None

    def timeline_view(self, params: dict) -> dict:
        """A span of a trace, t0 and t1 in ns from its first kernel (default: all of
        it), in `buckets` buckets a row when it holds too many kernels to send; mark
        names the kernel whose launches each bucket counts apart."""
        trace = self.trace(params)
        what = "ns from the trace's first kernel"
        t0 = _int(params, "t0", 0, -MAX_SPAN_NS, MAX_SPAN_NS, what)
        t1 = _int(params, "t1", max(t0 + 1, trace.end_ns - trace.start_ns), -MAX_SPAN_NS, MAX_SPAN_NS, what)
        if t0 >= t1:
            raise BadRequest("t0 must be before t1")
        buckets = _int(params, "buckets", 1000, 1, MAX_BUCKETS, "a number of buckets")
        mark = (params.get("mark") or [""])[-1]
        if len(mark) > 4096:
            raise BadRequest("mark: a kernel name of at most 4096 characters")
        return {"file": trace.file, **trace.view(t0, t1, buckets, mark)}

    def timeline_stack(self, params: dict) -> dict:
        trace = self.trace(params)
        i = _int(params, "stack", -1, 0, max(0, len(trace.stacks) - 1), "a stack index of the trace")
        if i < 0 or not trace.stacks:
            raise BadRequest("stack= names one of the trace's launch stacks")
        return {"stack": trace.launch_stack(i)}

    def intervals(self, params: dict) -> dict:
        """Bars of GPU time and launches: one per window, or, past MAX_BARS windows,
        one per equal slice of the range. A bar spans from the window before it (or
        one typical window back) to its own end. What samples through [dropped: …]
        markers claim is apart (dropped_gpu_ns…), out of the measured values."""
        from_ms, to_ms, files = self._files(params)
        self.cache.prefetch(files, totals_only=True)
        # A bar's end rounds up to the millisecond, so that the range a click on it
        # chooses, (start, end], holds its files (rounded down, it held none).
        ends = [-(-f.end_ns // 1_000_000) for f in files]
        gaps = sorted(b - a for a, b in zip(ends, ends[1:]))
        window_ms = gaps[len(gaps) // 2] if gaps else 10_000
        bars: list[dict] = []
        slots: dict[int, dict] = {}
        for i, (f, end_ms) in enumerate(zip(files, ends)):
            totals = self.cache.totals(f)
            if totals is None:
                continue  # unreadable, or rotated away
            slot = i if len(files) <= MAX_BARS else (end_ms - from_ms) * MAX_BARS // (to_ms - from_ms)
            bar = slots.get(slot)
            if bar is None:
                start = max(ends[i - 1] if i else from_ms, end_ms - window_ms)
                bar = slots[slot] = {
                    "start_ms": start,
                    "end_ms": end_ms,
                    "gpu_ns": 0,
                    "launches": 0,
                    "pc_samples": 0,
                    "dropped_gpu_ns": 0,
                    "dropped_launches": 0,
                    "dropped_pc_samples": 0,
                    "files": 0,
                }
                bars.append(bar)
            bar["end_ms"] = end_ms
            bar["gpu_ns"] += totals[0] - totals[3]
            bar["launches"] += totals[1] - totals[4]
            bar["pc_samples"] += totals[2] - totals[5]
            bar["dropped_gpu_ns"] += totals[3]
            bar["dropped_launches"] += totals[4]
            bar["dropped_pc_samples"] += totals[5]
            bar["files"] += 1
        return {"from": from_ms, "to": to_ms, "files": len(files), "window_ms": window_ms, "intervals": bars}

    def _merged(self, params: dict, prefix: str = "", filters: Optional[Filters] = None):
        from_ms, to_ms, files = self._files(params, prefix)
        try:
            filters = filters or parse_filters(params)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        catalog, decoded = self.cache.many(files)
        return from_ms, to_ms, Merged(catalog, decoded, filters), filters

    def range(self, params: dict) -> dict:
        value = _value(params)
        from_ms, to_ms, merged, filters = self._merged(params)
        labels = merged.group_labels()
        group = (params.get("group") or [""])[-1]
        if group and group not in labels:
            raise BadRequest(f"group: no label {group[:100]!r} in this range (its labels: {', '.join(labels)})")
        traces = self.store.in_range(from_ms * 1_000_000, to_ms * 1_000_000, traces=True)
        return {
            "from": from_ms,
            "to": to_ms,
            "files": merged.files,
            "type": value,
            "total": merged.total(value),
            "dropped": merged.dropped_total(value),
            "dropped_tree": merged.dropped_tree(value),
            "filters": filters.describe(),
            "lines": _flag(params, "lines"),
            "tree": merged.tree(value, group, _flag(params, "lines")),
            "top": merged.top(value, lines=_flag(params, "lines")),
            "group": group,
            "group_labels": labels,
            "labels": merged.label_values(value),
            "traces": len(traces),
            "comments": merged.comments,
        }

    def sandwich(self, params: dict) -> dict:
        """One frame's callers and callees over the range, filters applied."""
        value = _value(params)
        name = (params.get("name") or [""])[-1]
        if not name or len(name) > 4096:
            raise BadRequest("sandwich needs name= (a function or kernel of the range)")
        from_ms, to_ms, merged, filters = self._merged(params)
        try:
            out = sandwich(merged.catalog, merged.by_stack(value), name)
        except KeyError:
            raise BadRequest(f"no frame named {name[:200]!r} in this range") from None
        return {
            "from": from_ms,
            "to": to_ms,
            "files": merged.files,
            "type": value,
            "filters": filters.describe(),
            **out,
        }

    def diff(self, params: dict) -> dict:
        value = _value(params)
        try:
            filters = parse_filters(params)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        for _attempt in range(3):  # both ranges in one catalog (it may start over between)
            a_from, a_to, before, _ = self._merged(params, "a_", filters)
            b_from, b_to, after, _ = self._merged(params, "b_", filters)
            if before.catalog is after.catalog:
                break
        else:
            raise BadRequest("the UI's profile cache is restarting; try again", HTTPStatus.SERVICE_UNAVAILABLE)
        a, b = before.by_stack(value), after.by_stack(value)
        a_total, b_total = sum(a.values()), sum(b.values())
        # Ranges of different lengths or load: optionally compare shares, as pprof's
        # -normalize does, by scaling the earlier range to the later one's total.
        normalize = _flag(params, "normalize")
        if normalize and a_total:
            a = scaled(a, b_total / a_total)
        cat = after.catalog
        return {
            "a": {"from": a_from, "to": a_to, "files": before.files, "total": a_total},
            "b": {"from": b_from, "to": b_to, "files": after.files, "total": b_total},
            "type": value,
            "normalized": normalize,
            "filters": filters.describe(),
            "tree": tree_of(cat, [a, b], _flag(params, "lines")),
            "changes": changes(cat, a, b),
        }

    def download_profile(self, params: dict):
        from_ms, to_ms, merged, _ = self._merged(params)
        if not merged.files:
            raise BadRequest("no profile in this range", HTTPStatus.NOT_FOUND)
        name = range_name(_stamp(from_ms), _stamp(to_ms), PROFILE_SUFFIX)
        return (
            HTTPStatus.OK,
            merged.pprof(),
            "application/octet-stream",
            {"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def download_trace(self, params: dict):
        """The range's trace files, concatenated as they are sent (Stream): a Perfetto
        trace is a stream of TracePacket fields, so traces appended to one another are
        one valid trace."""
        from_ms, to_ms, _files = self._files(params)
        traces = self.store.in_range(from_ms * 1_000_000, to_ms * 1_000_000, traces=True)
        body = Stream(self.store, [f.name for f in traces], keep_open=False)
        if not body.parts:
            raise BadRequest("no Perfetto trace in this range", HTTPStatus.NOT_FOUND)
        name = range_name(_stamp(from_ms), _stamp(to_ms), TRACE_SUFFIX)
        return (
            HTTPStatus.OK,
            body,
            "application/octet-stream",
            {"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def file(self, name: str):
        body = Stream(self.store, [name], keep_open=True)  # nothing for a name that is not a store file's
        if not body.parts:
            raise BadRequest("no such file in the store", HTTPStatus.NOT_FOUND)
        return (
            HTTPStatus.OK,
            body,
            "application/octet-stream",
            {"Content-Disposition": f'attachment; filename="{name}"'},
        )


def _stamp(ms: int) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(ms / 1000))
