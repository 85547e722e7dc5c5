"""The shim's stapsdt notes checked against the contract (gpu_agent.probes.contract)."""

from __future__ import annotations

from pathlib import Path

from gpu_agent.probes import contract as C
from gpu_agent.probes import stapsdt


def check_shim_notes(path: Path) -> None:
    sites: dict[str, list] = {}
    for p in stapsdt.read_probes(str(path)):
        assert p.provider == C.PROVIDER, p
        sites.setdefault(p.name, []).append(p)
    assert set(sites) == set(C.PROBES), sorted(sites)
    for name, args in C.PROBES.items():
        for s in sites[name]:
            assert len(s.args) == len(args), (name, s.args)
            for spec, (_, typ) in zip(s.args, args):
                size = abs(int(spec.split("@")[0]))
                assert size == C.ARG_SIZES[typ], (name, s.args)
            assert bool(s.semaphore) == (name in C.SEMAPHORE_PROBES), name
            if s.semaphore:
                assert s.semaphore_offset > 0
