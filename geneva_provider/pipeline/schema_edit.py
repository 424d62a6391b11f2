"""A table's Lance schema with top-level fields renamed and field metadata rewritten, as one ``Project`` commit.

Why: Lance's ``alter_columns`` renames in one commit and ``UpdateConfig`` sets field metadata in another, so a
UDF column's rename -- the column, its fingerprint column and the metadata naming them (the fingerprint
column's owner, a multi-output group's columns) -- was two commits, and a process killed between them left a
fingerprint column owned by a name that no longer exists.  A ``Project`` commit takes a whole Lance schema:
built here from the dataset's own (its fields' protobuf messages, which carry the field ids the data files
refer to), with only names and metadata changed, it lands everything at once.

pylance 14 offers no public constructor of a ``LanceSchema`` that keeps field ids (``from_pyarrow`` numbers
them afresh), so the schema is rebuilt from its pickle form (``_from_protos``: the schema metadata as JSON and
one ``lance.file.Field`` message per field).  Only two fields of that message are touched -- ``name`` (2) and
``metadata`` (10, a ``map<string, bytes>``); every other one is copied byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lance.schema import LanceSchema

    from geneva_provider.core.lib_types import Dataset

_NAME, _ID, _PARENT_ID, _METADATA = 2, 3, 4, 10  # lance.file.Field's field numbers
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5  # protobuf wire types


@dataclass(frozen=True)
class SchemaField:
    """One field of a Lance schema: its id, its parent's (-1: a top-level field), name and metadata."""

    id: int
    parent_id: int
    name: str
    metadata: dict[str, bytes]


# A field's new (name, metadata), or None to keep it as it is.
FieldEdit = Callable[[SchemaField], "tuple[str, dict[str, bytes]] | None"]


def edited_schema(ds: Dataset, edit: FieldEdit, schema_metadata: Mapping[str, str | None] | None = None
                  ) -> LanceSchema:
    """``ds``'s Lance schema with each field as ``edit`` says (ids, types and order kept) and the schema metadata
    updated by ``schema_metadata`` (None removes a key): what ``LanceOperation.Project`` commits."""
    from lance.schema import LanceSchema

    metadata_json, protos = _pickled(ds.lance_schema)
    edited = []
    for proto in protos:
        entries = _entries(proto)
        field = _field(entries)
        change = edit(field)
        edited.append(proto if change is None else _with(entries, *change))
    metadata = {k: bytes(v) for k, v in json.loads(metadata_json).items()}
    for key, value in (schema_metadata or {}).items():
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value.encode()
    return LanceSchema._from_protos(json.dumps({k: list(v) for k, v in metadata.items()}), *edited)


def _pickled(schema: LanceSchema) -> tuple[str, list[bytes]]:
    """The schema metadata as JSON and one field message per field, as a Lance schema pickles itself."""
    reduced = schema.__reduce__()
    if not isinstance(reduced, tuple) or len(reduced) < 2:  # pragma: no cover -- a pylance that pickles otherwise
        raise TypeError(f"unexpected pickle form of a Lance schema: {reduced!r}")
    metadata_json, *protos = reduced[1]
    return str(metadata_json), [bytes(p) for p in protos]


def _field(entries: list[tuple[int, int, bytes | int, bytes]]) -> SchemaField:
    values: dict[int, bytes | int] = {}
    metadata: dict[str, bytes] = {}
    for number, _, value, _ in entries:
        if number == _METADATA and isinstance(value, bytes):
            item = {n: v for n, _, v, _ in _entries(value)}
            key, val = item.get(1, b""), item.get(2, b"")
            metadata[bytes(key).decode() if isinstance(key, bytes) else ""] = val if isinstance(val, bytes) else b""
        else:
            values[number] = value
    name = values.get(_NAME, b"")
    return SchemaField(id=_signed(values.get(_ID, 0)), parent_id=_signed(values.get(_PARENT_ID, 0)),
                       name=name.decode() if isinstance(name, bytes) else "", metadata=metadata)


def _with(entries: list[tuple[int, int, bytes | int, bytes]], name: str, metadata: Mapping[str, bytes]) -> bytes:
    """The field message with ``name`` and ``metadata``, every other entry as it was."""
    out = bytearray()
    for number, _, _, raw in entries:
        if number == _NAME:
            out += _len_entry(_NAME, name.encode())
        elif number != _METADATA:
            out += raw
    for key in sorted(metadata):
        out += _len_entry(_METADATA, _len_entry(1, key.encode()) + _len_entry(2, metadata[key]))
    return bytes(out)


def _signed(value: bytes | int) -> int:
    """An int32 read as a varint (negative numbers are ten-byte two's complement)."""
    n = value if isinstance(value, int) else 0
    return n - (1 << 64) if n >= 1 << 63 else n


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _len_entry(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _entries(data: bytes) -> list[tuple[int, int, bytes | int, bytes]]:
    """A protobuf message as (field number, wire type, value, the entry's raw bytes), in order."""
    entries: list[tuple[int, int, bytes | int, bytes]] = []
    i = 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == _VARINT:
            value, i = _varint(data, i)
        elif wire == _LEN:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            value, i = data[i:i + size], i + size
        else:  # pragma: no cover -- groups are not used by Lance's messages
            raise ValueError(f"unsupported protobuf wire type {wire} in a Lance field")
        entries.append((number, wire, value, data[start:i]))
    return entries
