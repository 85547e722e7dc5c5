"""Layer 6, the kernel timeline (`record --trace/--events/--store`, `trace`): every
kernel of a capture, once. The model (model.Timeline), its collection from BPF's
kernel events beside a Collector (collect), the deadline written into a traced
process (target), and the writers: a Perfetto trace (perfetto_trace, its interning in perfetto_intern), a Chrome
JSON trace (chrome_trace) and NDJSON kernel events (events_ndjson), which share
kernel_fields; and `.nanotrace` files of in-kernel events, read (versions 1 and
4) and written (version 4) by the nanotrace package. docs/timeline.md describes
the formats. Imports the layers below.

The writers are imported on first use: Perfetto's generated protobuf module is
large, and a command that writes only NDJSON should not pay for loading it."""

_WRITERS = {
    "write_perfetto": "perfetto_trace",
    "write_chrome": "chrome_trace",
    "write_events": "events_ndjson",
    "write_nanotrace": "nanotrace_trace",
}

__all__ = list(_WRITERS)


def __getattr__(name):
    if name in _WRITERS:
        import importlib

        return getattr(importlib.import_module(f".{_WRITERS[name]}", __name__), name)
    raise AttributeError(name)
