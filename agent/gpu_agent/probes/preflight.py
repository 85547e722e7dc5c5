"""Checks run before anything touches eBPF, each failing with one actionable line.

bcc's own failures (a clang error dump, "Failed to attach BPF to uprobe") do
not say what is missing; these checks do. The CLI calls check() first.
"""

from __future__ import annotations

import os
import warnings
import subprocess
import sys

DIST_PACKAGES = "/usr/lib/python3/dist-packages"
UPROBE_PMU = "/sys/bus/event_source/devices/uprobe"
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
CAP_SYS_ADMIN = 21
CAP_BPF = 39
CAP_PERFMON = 38


class PreflightError(RuntimeError):
    pass


def import_bcc():
    """Import bcc, falling back to the distribution's module directory.

    Debian/Ubuntu ship bcc only for the system python3 (python3-bpfcc); a
    virtualenv or pyenv interpreter does not see it, but the pure-Python
    module works with any Python 3 once the directory is on sys.path.
    """
    # bcc 0.26 has non-raw regex strings that Python >= 3.12 warns about at compile
    # time; the warning would be the agent's first line of output, so hide it.
    warnings.filterwarnings("ignore", category=SyntaxWarning, module=r"bcc(\..*)?")
    warnings.filterwarnings("ignore", category=SyntaxWarning, message=r".*invalid escape sequence.*")
    try:
        import bcc  # noqa: F401
    except ImportError:
        if os.path.isdir(os.path.join(DIST_PACKAGES, "bcc")) and DIST_PACKAGES not in sys.path:
            sys.path.append(DIST_PACKAGES)
        try:
            import bcc  # noqa: F401
        except ImportError as e:
            raise PreflightError(
                "the BCC Python module is not installed: apt-get install python3-bpfcc "
                f"(Debian/Ubuntu) or the bcc-python package of your distribution ({e})"
            ) from None
        except OSError as e:  # the module is there but libbcc.so.0 is not
            raise PreflightError(f"libbcc cannot be loaded: apt-get install libbpfcc ({e})") from None
    import bcc

    return bcc


def _cap_eff() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int(parts[1].split("-")[0])) >= (major, minor)
    except (ValueError, IndexError):
        return True  # unknown: assume the newer, stricter kernel


def _check_root() -> None:
    caps = _cap_eff()
    # CAP_SYS_ADMIN: perf uprobes require it again since Linux 6.16 ("perf: Revert to
    # requiring CAP_SYS_ADMIN for uprobes", also in stable kernels); it covers bpf() too.
    # Root without it (a container that drops it) would attach nothing and record an
    # empty profile: say so before anything runs.
    if caps & (1 << CAP_SYS_ADMIN):
        return
    if os.geteuid() == 0:
        if not _kernel_at_least(6, 16) and caps & (1 << CAP_BPF) and caps & (1 << CAP_PERFMON):
            return
        raise PreflightError(
            f"gpu-agent runs as root without CAP_SYS_ADMIN, which Linux "
            f"{os.uname().release} requires to attach uprobes: give the process "
            "CAP_SYS_ADMIN (a container's securityContext.capabilities.add)"
        )
    raise PreflightError(
        "gpu-agent must run as root (or with CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and "
        "CAP_SYS_PTRACE) to attach uprobes and load eBPF programs: run it with sudo"
    )


def _check_headers() -> None:
    release = os.uname().release
    if os.environ.get("BCC_KERNEL_SOURCE"):
        return
    if os.path.isdir(f"/lib/modules/{release}/build"):
        return
    # bcc can also use headers built into the kernel (CONFIG_IKHEADERS).
    if os.path.exists("/sys/kernel/kheaders.tar.xz"):
        return
    raise PreflightError(
        f"kernel headers for {release} not found (/lib/modules/{release}/build "
        f"is missing): apt-get install linux-headers-{release}"
    )


def _check_uprobes() -> None:
    if not os.path.exists(os.path.join(UPROBE_PMU, "type")):
        raise PreflightError(
            "this kernel has no uprobe support (CONFIG_UPROBE_EVENTS): "
            "gpu-agent cannot attach to the shim's USDT probes"
        )
    if not os.path.exists(os.path.join(UPROBE_PMU, "format", "ref_ctr_offset")):
        raise PreflightError(
            "this kernel's uprobes lack USDT semaphore support (ref_ctr_offset, Linux >= 4.20): gpu-agent needs it"
        )


def _check_tracefs() -> None:
    """bcc looks up tracepoint ids in tracefs; mount it if a container left it out."""
    for d in TRACEFS_DIRS:
        if os.path.isdir(os.path.join(d, "events")):
            return
    if os.geteuid() == 0 and os.path.isdir(TRACEFS_DIRS[0]):
        subprocess.run(
            ["mount", "-t", "tracefs", "tracefs", TRACEFS_DIRS[0]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        if os.path.isdir(os.path.join(TRACEFS_DIRS[0], "events")):
            return
    raise PreflightError("tracefs is not mounted: mount -t tracefs tracefs /sys/kernel/tracing")


def check() -> None:
    """Raise PreflightError naming the first missing prerequisite."""
    _check_root()
    import_bcc()
    _check_headers()
    _check_uprobes()
    _check_tracefs()


def tracepoint_has_field(category: str, event: str, field: str) -> bool:
    """Whether a tracepoint's format lists a field (older kernels lack some)."""
    for d in TRACEFS_DIRS:
        try:
            with open(os.path.join(d, "events", category, event, "format")) as f:
                return any(f" {field};" in line for line in f)
        except OSError:
            continue
    return False
