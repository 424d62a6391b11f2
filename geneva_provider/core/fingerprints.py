"""Row fingerprints: a 64-bit hash of a row's input values, to tell which computed values are still valid.

A UDF column is stored with a companion fingerprint column: for every computed row, the hash of
the inputs it was computed from (seeded with the UDF's version).  Lance carries both through every
table change -- compaction, update, merge_insert, delete -- because they are ordinary columns of
the same data file, so a value is valid exactly when its stored fingerprint equals the fingerprint
of the row's current inputs, wherever the row now lives.

The hash is deterministic across processes and machines (no Python ``hash``), vectorised with
numpy, and defined for every Arrow type (primitives by their bits, strings and binaries by their
bytes, lists, fixed-size lists and structs through their children; anything else by its text).
It detects changes; it is not meant to resist an adversary.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.contracts.kinds import DigestScheme

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_NULL = np.uint64(0x6A09E667F3BCC909)
_BYTES_PER_PIECE = 1 << 22  # bounds the memory of hashing variable-width data


def _mix(x: np.ndarray, *, inplace: bool = False) -> np.ndarray:
    """splitmix64's finaliser, element-wise (uint64 arithmetic wraps); in place when asked (and allowed)."""
    with np.errstate(over="ignore"):
        x = np.add(x, _GOLDEN, out=x if inplace else None)
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
        return x


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values[offsets[i]:offsets[i+1]]`` for each row (mod 2**64)."""
    with np.errstate(over="ignore"):
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(values, dtype=np.uint64)])
        return sums[offsets[1:]] - sums[offsets[:-1]]


def _positions(offsets: np.ndarray) -> np.ndarray:
    """For each element, its position within its row."""
    lengths = np.diff(offsets)
    starts = np.repeat(offsets[:-1], lengths)
    return np.arange(offsets[0], offsets[-1], dtype=np.int64) - starts


def _hash_sequence(element_hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Combines per-element hashes into per-row hashes: order-sensitive, length-sensitive."""
    with np.errstate(over="ignore"):
        pos = _positions(offsets).astype(np.uint64)
        mixed = _mix(element_hashes ^ _mix(pos))
        return _mix(_segment_sums(mixed, offsets) ^ _mix(np.diff(offsets).astype(np.uint64) + _M2))


def _hash_bytes(arr: pa.Array) -> np.ndarray:
    """Per-row hash of a (large) binary array's bytes, in pieces of bounded size."""
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = arr.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    out = np.empty(n, np.uint64)
    row = 0
    while row < n:
        end = int(np.searchsorted(offsets, offsets[row] + _BYTES_PER_PIECE, side="right")) - 1
        end = min(max(end, row + 1), n)
        piece = offsets[row:end + 1]
        chunk = data[piece[0]:piece[-1]].astype(np.uint64)
        out[row:end] = _hash_sequence(chunk, piece - piece[0])
        row = end
    return out


def hash_array(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A uint64 hash per element of ``arr`` (NULL elements hash to a fixed value)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    n = len(arr)
    if pa.types.is_dictionary(t):
        return hash_array(arr.dictionary_decode())
    if pa.types.is_null(t):
        return np.full(n, _NULL, np.uint64)
    nulls = arr.null_count > 0
    if pa.types.is_boolean(t):
        h = _mix(_filled(arr, False).astype(np.uint64), inplace=True)
    elif pa.types.is_integer(t) or (pa.types.is_temporal(t) and t.bit_width in (32, 64)):
        ints = arr if pa.types.is_integer(t) else arr.view(pa.int64() if t.bit_width == 64 else pa.int32())
        h = _mix(np.asarray(_filled(ints, 0), dtype=np.int64).view(np.uint64))
    elif pa.types.is_floating(t):
        h = _mix(np.asarray(_filled(arr, 0), dtype=np.float64).view(np.uint64))
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
            pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        h = _hash_bytes(arr.cast(pa.large_binary()))
    elif pa.types.is_fixed_size_binary(t):
        h = _hash_bytes(arr.cast(pa.large_binary()))
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        flat = arr.cast(pa.large_list(t.value_type)) if pa.types.is_list(t) else arr
        offsets = np.frombuffer(flat.buffers()[1], dtype=np.int64)[flat.offset:flat.offset + n + 1]
        children = hash_array(flat.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
        h = _hash_sequence(children, offsets - offsets[0])
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, n * size)
        h = _hash_sequence(hash_array(values), np.arange(n + 1, dtype=np.int64) * size)
    elif pa.types.is_struct(t):
        h = np.full(n, _mix(np.array([t.num_fields], np.uint64))[0], np.uint64)
        with np.errstate(over="ignore"):
            for i in range(t.num_fields):
                h = _mix(h * _M1 + hash_array(arr.field(i)) + np.uint64(i))
    else:  # decimals, maps, unions, extension types: by their text
        h = _hash_bytes(pa.array([repr(v) for v in arr.to_pylist()], pa.large_string()).cast(pa.large_binary()))
    if nulls:
        h[~arr.is_valid().to_numpy(zero_copy_only=False)] = _NULL
    return h


def _filled(arr: pa.Array, fill: object) -> np.ndarray:
    """The array's values as numpy, NULLs replaced by ``fill`` (zero-copy when it can be)."""
    return (pc.fill_null(arr, fill) if arr.null_count else arr).to_numpy(zero_copy_only=False)


def row_fingerprints(columns: Sequence[pa.Array | pa.ChunkedArray], seed: str, num_rows: int | None = None
                     ) -> pa.Array:
    """The fingerprint (uint64) of each row of ``columns``, seeded with ``seed`` (e.g. the UDF version)."""
    seed_hash = hash_array(pa.array([seed], pa.large_string()))[0]
    n = num_rows if num_rows is not None else len(columns[0])
    h = np.full(n, seed_hash, np.uint64)
    with np.errstate(over="ignore"):
        for i, col in enumerate(columns):
            h *= _M2
            h += hash_array(col)
            _mix(h, inplace=True)
            h += np.uint64(i + 1)
    return pa.array(h, pa.uint64())


FINGERPRINT_PREFIX = "__geneva_fp"
FINGERPRINT_OF = "geneva::fingerprint_of"


def fingerprint_column(column: str | None = None) -> str:
    """The companion column of ``column`` (of a view's computed columns when None)."""
    return f"{FINGERPRINT_PREFIX}__{column}" if column else FINGERPRINT_PREFIX


def fingerprint_field(column: str | None = None) -> pa.Field:
    """The nullable uint64 field holding the fingerprints of ``column``'s values (NULL: never computed)."""
    return pa.field(fingerprint_column(column), pa.uint64(), nullable=True,
                    metadata={FINGERPRINT_OF: column or "*"})


def holds_fingerprints_of(field: pa.Field, column: str | None = None) -> bool:
    """True when ``field`` is the package's fingerprint column of ``column``, not a user's column of that name."""
    of = (field.metadata or {}).get(FINGERPRINT_OF.encode())
    return field.name == fingerprint_column(column) and pa.types.is_uint64(field.type) and \
        of == (column or "*").encode()


def left_by_a_rename(schema: pa.Schema, column: str) -> str | None:
    """The name ``column`` had before a rename left half done, else None.

    Earlier versions of the package renamed a UDF column and its fingerprint column in one commit and set
    the fingerprint column's owner to the new name in a second: a kill between them left ``column``'s
    fingerprint column owned by its former name, which no column has any more.  Its fingerprints are
    ``column``'s (the rename kept every value), so a backfill or ``status()`` reads them as such, and the next
    change of the schema (the rerun of the rename, or the backfill) sets the owner.
    """
    fp = fingerprint_column(column)
    if column not in schema.names or fp not in schema.names or not pa.types.is_uint64(schema.field(fp).type):
        return None
    of = (schema.field(fp).metadata or {}).get(FINGERPRINT_OF.encode())
    former = of.decode() if of is not None else None
    if former is None or former in ("*", column) or former in schema.names:
        return None
    return former


def is_fingerprint_column(name: str) -> bool:
    return name == FINGERPRINT_PREFIX or name.startswith(FINGERPRINT_PREFIX + "__")


def digest_fingerprints(columns: Sequence[pa.Array | pa.ChunkedArray], seed: str, num_rows: int, *,
                        scheme: DigestScheme) -> pa.Array:
    """A uint64 fingerprint per row of ``columns``: a 64-bit hash (``scheme``) of the row's values, seeded
    with ``seed``.

    For fingerprints compared only with others of this function (a UDTF view's parents): long strings --
    documents -- cost one C call per value here, where :func:`row_fingerprints` (whose values are stored in
    every table and so can never change) spends several numpy passes over each byte.  Fixed-width values
    enter by their :func:`hash_array` hash, variable-width ones by their bytes and length.
    """
    # Each row's message -- per column, b"\x00" for a NULL, else its length (8 bytes, little-endian) and its
    # bytes -- is built by Arrow for all rows at once; Python then makes one hash per row.
    pieces = [piece for col in columns for piece in _framed(col)]
    message = pieces[0] if len(pieces) == 1 else pc.binary_join_element_wise(*pieces, _large_binary(b""))
    if not num_rows:
        return pa.array(np.zeros(0, np.uint64), pa.uint64())
    offsets = np.frombuffer(message.buffers()[1], np.int64)[message.offset:message.offset + num_rows + 1].tolist()
    data = memoryview(message.buffers()[2] or b"")
    if scheme is DigestScheme.XXH3:
        import xxhash

        hash64, key = xxhash.xxh3_64_intdigest, xxhash.xxh3_64_intdigest(seed.encode())
        return pa.array(np.fromiter((hash64(data[start:end], key) for start, end in pairwise(offsets)), np.uint64,
                                    count=num_rows), pa.uint64())
    import hashlib

    keyed = hashlib.blake2b(digest_size=8, key=seed.encode()[:64])  # copied per row: keying is a whole block's work
    digests = []
    for start, end in pairwise(offsets):
        h = keyed.copy()
        h.update(data[start:end])
        digests.append(h.digest())
    return pa.array(np.frombuffer(b"".join(digests), "<u8"), pa.uint64())


@cache
def _large_binary(value: bytes) -> pa.Scalar:
    """A large_binary scalar, made at first use: ``pa.scalar`` imports pandas (~0.5 s), which a process that only
    plans (an Airflow task, the CLI) never needs."""
    return pa.scalar(value, pa.large_binary())


def _framed(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """One column's part of each row's message for :func:`digest_fingerprints`, as large_binary arrays to join."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    n = len(arr)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or
            pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        # fixed-width values enter by their 8-byte hash (never NULL): the length 8, then the hash
        framed = np.empty((n, 2), "<u8")
        framed[:, 0], framed[:, 1] = 8, hash_array(arr)
        return [_binary(np.arange(0, 16 * n + 1, 16, dtype=np.int64), framed.tobytes())]
    values = arr.cast(pa.large_binary())
    if values.null_count:
        whole = pc.binary_join_element_wise(*_framed(values.fill_null(b"")), _large_binary(b""))
        return [pc.if_else(values.is_null(), _large_binary(b"\x00"), whole)]
    offsets = np.frombuffer(values.buffers()[1], np.int64)[values.offset:values.offset + n + 1]
    return [_binary(np.arange(0, 8 * n + 1, 8, dtype=np.int64), np.diff(offsets).astype("<u8").tobytes()), values]


def _binary(offsets: np.ndarray, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
