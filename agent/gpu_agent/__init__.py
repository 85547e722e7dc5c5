"""gpu-agent: a system-wide, always-on GPU profiler.

The public API is deliberately thin; the CLI (`gpu-agent`) is the main entry
point. One module per CLI command lives in gpu_agent.commands, one per output
format (pprof.py), and the native side lives in shim/ and bpf/ at the top of
the repository.
"""

__version__ = "0.1.0"

from .probes.paths import shim_path  # noqa: E402,F401
