"""profile.proto's messages read with some fields as raw bytes.

The same schema (built from profile_pb2's own descriptor, no second .proto) with
some fields' types changed to wire-compatible ones: a message field is
length-delimited, and so is a packed list of numbers, so reading either as `bytes`
keeps its encoding. A repeated field's parts then come out of upb as a list of bytes,
hashable as they are, without a Python object per element.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ...profile.vocabulary import NUMBERING_FIELD
from ...proto import profile_pb2

_B = descriptor_pb2.FieldDescriptorProto


def profile_view(name: str, as_bytes: dict[str, set[str]], repeated: dict[str, set[str]] = None) -> dict:
    """The messages of profile.proto under package gpu_agent.ui.<name>, with the fields
    as_bytes[message] read as bytes and the fields repeated[message] made repeated
    (a concatenation of messages then keeps every occurrence), and the agent's own
    field in Profile (`numbering`, NUMBERING_FIELD). {message name: class}."""
    fdp = descriptor_pb2.FileDescriptorProto()
    profile_pb2.DESCRIPTOR.CopyToProto(fdp)
    profile = next(m for m in fdp.message_type if m.name == "Profile")
    profile.field.add(name="numbering", number=NUMBERING_FIELD, type=_B.TYPE_STRING, label=_B.LABEL_OPTIONAL)
    old, new = "." + fdp.package + ".", f".gpu_agent.ui.{name}."
    fdp.name, fdp.package = f"gpu_agent/ui/{name}.proto", new.strip(".")
    for message in fdp.message_type:
        for f in message.field:
            if f.type_name.startswith(old):
                f.type_name = new + f.type_name[len(old) :]
            if f.name in as_bytes.get(message.name, ()):
                f.type = _B.TYPE_BYTES
                f.ClearField("type_name")
            if f.name in (repeated or {}).get(message.name, ()):
                f.label = _B.LABEL_REPEATED
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(new.strip(".") + "." + m.name))
        for m in fdp.message_type
    }


# The general reader's view (profiles.decode): a sample's labels as raw bytes, so that
# its label set is one dictionary look-up, decoded once per distinct set.
ProfileView = profile_view("profile_view", {"Sample": {"label"}})["Profile"]

# The numbered reader's (numbered.py): samples, locations, functions and mappings as
# bytes; a sample's location ids as the bytes of their packed list; a location's id
# repeated, so that many locations parsed as one give all their ids.
_RAW = profile_view(
    "profile_raw",
    {
        "Profile": {"sample", "location", "function", "mapping"},
        "Sample": {"location_id", "label"},
        "Location": {"line"},
    },
    repeated={"Location": {"id"}},
)
RawProfile, FlatSamples, FlatLocations = _RAW["Profile"], _RAW["Sample"], _RAW["Location"]
