"""Writers that turn a Timeline (timeline.py) into files: a Perfetto trace
(perfetto_trace.py), a Chrome JSON trace (chrome_trace.py) and NDJSON kernel
events (events_ndjson.py). docs/timeline.md describes the formats.

The writers are imported on first use: Perfetto's generated protobuf module is
large, and a command that writes only NDJSON should not pay for loading it."""

_WRITERS = {
    "write_perfetto": "perfetto_trace",
    "write_chrome": "chrome_trace",
    "write_events": "events_ndjson",
}

__all__ = list(_WRITERS)


def __getattr__(name):
    if name in _WRITERS:
        import importlib
        return getattr(importlib.import_module(f".{_WRITERS[name]}", __name__), name)
    raise AttributeError(name)
