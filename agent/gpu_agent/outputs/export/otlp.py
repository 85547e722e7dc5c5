"""One window -> opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export.

The schema comes from the opentelemetry-proto package, pinned in pyproject
(the v1development profiles schema still changes between releases).

Mapping: one ResourceProfiles per process (resource attributes host.name,
process.pid, process.executable.name, k8s.pod.name / k8s.namespace.name /
k8s.container.name where known, plus --label k=v), one ScopeProfiles
(gpu-agent), and two Profiles, gpu_time/nanoseconds and
kernel_launches/count (an OTLP profile has one sample type), sharing one
ProfilesDictionary for the whole request. Stacks are leaf first as in pprof;
the kernel frame is the leaf. Sample attributes are the pprof labels
(cuda_device, cuda_stream, cuda_graph, ...). Native mappings carry the GNU
build id as process.executable.build_id.gnu. With include_pprof, each
gpu_time profile also carries the process's gzip pprof as original_payload
(original_payload_format "pprof").
"""

from __future__ import annotations

from typing import Mapping

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as otlp

from ... import __version__ as AGENT_VERSION

METHOD = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

POD_ATTRS = {"pod": "k8s.pod.name", "namespace": "k8s.namespace.name", "container": "k8s.container.name"}


class _Dict:
    """Builds a ProfilesDictionary: every table starts with its zero value, no duplicates."""

    def __init__(self, d: "otlp.ProfilesDictionary"):
        self.d = d
        self.strings: dict[str, int] = {}
        self.attrs: dict[tuple, int] = {}
        self.mappings: dict[tuple, int] = {}
        self.functions: dict[tuple, int] = {}
        self.locations: dict[tuple, int] = {}
        self.stacks: dict[tuple, int] = {}
        self.s("")
        d.mapping_table.add()
        d.location_table.add()
        d.function_table.add()
        d.link_table.add()
        d.attribute_table.add()
        d.stack_table.add()

    def s(self, text: str) -> int:
        i = self.strings.get(text)
        if i is None:
            i = self.strings[text] = len(self.d.string_table)
            self.d.string_table.append(text)
        return i

    def attr(self, key: str, value) -> int:
        k = (key, type(value).__name__, value)
        i = self.attrs.get(k)
        if i is None:
            a = self.d.attribute_table.add(key_strindex=self.s(key))
            if isinstance(value, int):
                a.value.int_value = value
            else:
                a.value.string_value = str(value)
            i = self.attrs[k] = len(self.d.attribute_table) - 1
        return i

    def mapping(self, m, strings) -> int:
        key = (m.memory_start, m.memory_limit, m.file_offset, strings[m.filename], strings[m.build_id])
        i = self.mappings.get(key)
        if i is None:
            om = self.d.mapping_table.add(
                memory_start=m.memory_start,
                memory_limit=m.memory_limit,
                file_offset=m.file_offset,
                filename_strindex=self.s(strings[m.filename]),
            )
            if strings[m.build_id]:
                om.attribute_indices.append(self.attr("process.executable.build_id.gnu", strings[m.build_id]))
            i = self.mappings[key] = len(self.d.mapping_table) - 1
        return i

    def function(self, f, strings) -> int:
        key = (strings[f.name], strings[f.system_name], strings[f.filename], f.start_line)
        i = self.functions.get(key)
        if i is None:
            self.d.function_table.add(
                name_strindex=self.s(key[0]),
                system_name_strindex=self.s(key[1]),
                filename_strindex=self.s(key[2]),
                start_line=f.start_line,
            )
            i = self.functions[key] = len(self.d.function_table) - 1
        return i

    def location(self, mapping_index: int, address: int, lines: tuple) -> int:
        key = (mapping_index, address, lines)
        i = self.locations.get(key)
        if i is None:
            loc = self.d.location_table.add(mapping_index=mapping_index, address=address)
            for fidx, line in lines:
                loc.lines.add(function_index=fidx, line=line)
            i = self.locations[key] = len(self.d.location_table) - 1
        return i

    def stack(self, locs: tuple) -> int:
        i = self.stacks.get(locs)
        if i is None:
            self.d.stack_table.add(location_indices=locs)
            i = self.stacks[locs] = len(self.d.stack_table) - 1
        return i


def _kv(key: str, value) -> common_pb2.KeyValue:
    kv = common_pb2.KeyValue(key=key)
    if isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = str(value)
    return kv


def add_process(req, dic: _Dict, profile, resource_attrs: Mapping[str, object], include_pprof: bytes = b"") -> None:
    """Append one process's pprof (a profile_pb2.Profile) as a ResourceProfiles."""
    strings = list(profile.string_table)
    rp = req.resource_profiles.add()
    for k, v in resource_attrs.items():
        rp.resource.attributes.append(_kv(k, v))
    sp = rp.scope_profiles.add()
    sp.scope.name = "gpu-agent"
    sp.scope.version = AGENT_VERSION

    mappings = {m.id: dic.mapping(m, strings) for m in profile.mapping}
    functions = {f.id: dic.function(f, strings) for f in profile.function}
    locations = {
        loc.id: dic.location(
            mappings.get(loc.mapping_id, 0),
            loc.address,
            tuple((functions.get(ln.function_id, 0), ln.line) for ln in loc.line),
        )
        for loc in profile.location
    }
    for vi, st in enumerate(profile.sample_type):
        p = sp.profiles.add(
            time_unix_nano=profile.time_nanos, duration_nano=profile.duration_nanos, period=profile.period
        )
        p.sample_type.type_strindex = dic.s(strings[st.type])
        p.sample_type.unit_strindex = dic.s(strings[st.unit])
        p.period_type.type_strindex = dic.s(strings[profile.period_type.type])
        p.period_type.unit_strindex = dic.s(strings[profile.period_type.unit])
        if vi == 0 and include_pprof:
            p.original_payload_format = "pprof"
            p.original_payload = include_pprof
        for s in profile.sample:
            if vi >= len(s.value) or s.value[vi] == 0:
                continue
            os_ = p.samples.add(stack_index=dic.stack(tuple(locations[i] for i in s.location_id)))
            os_.values.append(s.value[vi])
            for lab in s.label:
                os_.attribute_indices.append(dic.attr(strings[lab.key], strings[lab.str]))


def encode(window, node: str, extra: Mapping[str, str], include_pprof: bool = False) -> bytes:
    """window: profile.interval.IntervalProfiles built with per_pid=True."""
    req = svc.ExportProfilesServiceRequest()
    dic = _Dict(req.dictionary)
    for pid in sorted(window.per_pid):
        info = window.procs[pid]
        builder = window.per_pid[pid]
        attrs: dict[str, object] = {"host.name": node, "process.pid": pid, "process.executable.name": info.comm}
        for k, v in info.pod.items():
            if k in POD_ATTRS and v:
                attrs[POD_ATTRS[k]] = v
        attrs.update(extra)
        add_process(req, dic, builder.to_proto(), attrs, builder.to_bytes() if include_pprof else b"")
    return req.SerializeToString()


def response_deserializer(data: bytes):
    return svc.ExportProfilesServiceResponse.FromString(data)
