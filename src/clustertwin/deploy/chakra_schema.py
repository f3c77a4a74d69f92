"""MLCommons Chakra's execution-trace schema (``et_def.proto``, vendored beside this module) as protobuf
message classes, built at run time from the vendored text: the proto3 subset it uses (messages with scalar,
message, enum, ``repeated`` and ``oneof`` fields; top-level enums) is read into a
``descriptor_pb2.FileDescriptorProto`` and turned into classes by ``message_factory``, so no generated
``_pb2`` module (and no protoc) is needed and any ``protobuf`` release from 4 on serves.

``encode_message`` / ``decode_messages``: the length-delimited framing of Chakra's
``src/third_party/utils/protolib.py`` (``encodeMessage``: the serialized size as a varint, then the bytes).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any, BinaryIO

PROTO_FILE = "et_def.proto"
_SCALARS = {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "fixed64": 6, "fixed32": 7, "bool": 8,
            "string": 9, "bytes": 12, "uint32": 13, "sfixed32": 15, "sfixed64": 16, "sint32": 17, "sint64": 18}
_TYPE_MESSAGE, _TYPE_ENUM = 11, 14
_LABEL_OPTIONAL, _LABEL_REPEATED = 1, 3
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*|\d+|[{};=]")


def _protobuf() -> Any:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        from clustertwin.errors import SpecError

        raise SpecError("export chakra needs the protobuf package: pip install 'clustertwin[chakra]'") from None
    return descriptor_pb2, descriptor_pool, message_factory


def proto_text() -> str:
    """The vendored ``et_def.proto``."""
    return resources.files("clustertwin.deploy").joinpath(PROTO_FILE).read_text(encoding="utf-8")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(re.sub(r"//[^\n]*", "", text))


def parse_proto(text: str) -> dict[str, Any]:
    """``{"package", "enums": {name: [(value, number)]}, "messages": {name: [(label, type, name, number,
    oneof or None)]}}`` of a proto3 file without nesting, options or imports (what ``et_def.proto`` is)."""
    tok, i = _tokens(text), 0
    out: dict[str, Any] = {"package": "", "enums": {}, "messages": {}}
    while i < len(tok):
        t = tok[i]
        if t in ("syntax", "package"):
            j = tok.index(";", i)
            if t == "package":
                out["package"] = tok[i + 1]
            i = j + 1
        elif t == "enum":
            name, i = tok[i + 1], i + 3
            vals = out["enums"][name] = []
            while tok[i] != "}":
                vals.append((tok[i], int(tok[i + 2])))
                i += 4
            i += 1
        elif t == "message":
            name, i = tok[i + 1], i + 3
            fields = out["messages"][name] = []
            oneof = None
            while True:
                if tok[i] == "}":
                    i += 1
                    if oneof is None:
                        break
                    oneof = None
                    continue
                if tok[i] == "oneof":
                    oneof, i = tok[i + 1], i + 3
                    continue
                label = "repeated" if tok[i] == "repeated" else "optional"
                i += label == "repeated"
                fields.append((label, tok[i], tok[i + 1], int(tok[i + 3]), oneof))
                i += 5
        else:
            raise ValueError(f"{PROTO_FILE}: unexpected token {t!r}")
    return out


def _file_descriptor(parsed: dict[str, Any]) -> Any:
    descriptor_pb2, _, _ = _protobuf()
    fdp = descriptor_pb2.FileDescriptorProto(name=f"clustertwin/{PROTO_FILE}", package=parsed["package"],
                                             syntax="proto3")
    for name, vals in parsed["enums"].items():
        e = fdp.enum_type.add(name=name)
        for v, n in vals:
            e.value.add(name=v, number=n)
    pkg = parsed["package"]
    for name, fields in parsed["messages"].items():
        m = fdp.message_type.add(name=name)
        oneofs: list[str] = []
        for label, typ, fname, number, oneof in fields:
            f = m.field.add(name=fname, number=number,
                            label=_LABEL_REPEATED if label == "repeated" else _LABEL_OPTIONAL)
            if typ in _SCALARS:
                f.type = _SCALARS[typ]
            else:
                f.type = _TYPE_ENUM if typ in parsed["enums"] else _TYPE_MESSAGE
                f.type_name = f".{pkg}.{typ}"
            if oneof is not None:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    m.oneof_decl.add(name=oneof)
                f.oneof_index = oneofs.index(oneof)
    return fdp


@lru_cache(maxsize=1)
def schema() -> Any:
    """Namespace of the schema's message classes (``Node``, ``GlobalMetadata``, ``AttributeProto``, ...) and
    enum values (``COMP_NODE``, ``ALL_REDUCE``, ...)."""
    _, descriptor_pool, message_factory = _protobuf()
    parsed = parse_proto(proto_text())
    pool = descriptor_pool.DescriptorPool()
    fd = pool.Add(_file_descriptor(parsed))
    ns: dict[str, Any] = {}
    for name in parsed["messages"]:
        desc = pool.FindMessageTypeByName(f"{parsed['package']}.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        ns[name] = get(desc) if get else message_factory.MessageFactory(pool).GetPrototype(desc)
    for vals in parsed["enums"].values():
        ns.update(dict(vals))
    ns["file_descriptor"] = fd
    return type("ChakraSchema", (), ns)


def encode_message(out: BinaryIO, message: Any) -> None:
    """Write ``message`` length-delimited (protolib ``encodeMessage``)."""
    data = message.SerializeToString()
    n = len(data)
    while True:
        bits, n = n & 0x7F, n >> 7
        out.write(bytes([bits | (0x80 if n else 0)]))
        if not n:
            break
    out.write(data)


def decode_messages(data: bytes) -> list[bytes]:
    """The length-delimited payloads of an ``.et`` file, in order (the first is the ``GlobalMetadata``)."""
    out, i = [], 0
    while i < len(data):
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append(data[i:i + n])
        i += n
    return out
