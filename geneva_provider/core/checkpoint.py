"""Checkpoint stores and the key formats that name what they hold (core).

Stages talk to each other only through the store: apply writes one batch checkpoint per
computed range, the writer reads them back and records the files it staged (one record for
many fragments), and plans are documents in the same store.  Keys become file names, so every user-supplied string
is hashed, and keys are parsed from the right, where the structure is fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from geneva_provider.core.errors import CorruptCheckpointError, InvalidArgumentError
from geneva_provider.core.filters import lance_reason

if TYPE_CHECKING:
    import pyarrow as pa
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

KEY_SUFFIX = ".lance"
_MIN_FILE_BYTES = 40  # a Lance file's footer alone is longer
ROWADDR = "_rowaddr"  # the row-address column of every batch checkpoint
_BATCH_RE = re.compile(r"^(?P<prefix>.+)_frag-(?P<frag>\d+)_range-(?P<start>\d+)-(?P<end>\d+)(?P<partial>_partial)?$")
_PLAIN_VERSION = re.compile(r"[0-9A-Za-z]{1,16}")
PARTIAL = "_partial"  # the suffix of a batch checkpoint holding rows the UDF's error policy skipped
_STAGED_RE = re.compile(r"^(?P<prefix>.+)_staged-[0-9a-f]{32}$")


def md5_hex(text: str) -> str:
    """The full md5 hex digest of ``text`` (used for where, uri and source files)."""
    return hashlib.md5(text.encode()).hexdigest()


def short_hash(text: str) -> str:
    """A 16-hex-digit hash for user names, short enough to keep keys under file name limits."""
    return md5_hex(text)[:16]


def job_prefix(udf_name: str, udf_version: str, column: str, where: str | None, table_uri: str) -> str:
    """The part of every key shared by one column's backfills with the same UDF and filter."""
    # A version is the user's string (a uuid, "v2-experimental"...): kept as is only while short and plain.
    version = udf_version if _PLAIN_VERSION.fullmatch(udf_version) else short_hash(udf_version)
    return (
        f"udf-{short_hash(udf_name)}_ver-{version}_col-{short_hash(column)}"
        f"_where-{md5_hex(where or '')}_uri-{md5_hex(table_uri)}"
    )


def src_files_key(src_files: list[str]) -> str:
    """Names a set of source files (what batch checkpoints are computed from) in a key."""
    return md5_hex(json.dumps(sorted(src_files)))


def batch_prefix(job: str, src_files: list[str] | None = None, *, src_key: str | None = None) -> str:
    """The key prefix of batch checkpoints computed from exactly these source files."""
    return f"{job}_srcfiles-{src_key or src_files_key(src_files or [])}"


def batch_key(prefix: str, frag_id: int, start: int, end: int, *, partial: bool = False) -> str:
    """Key of the checkpoint holding rows ``[start, end)`` (fragment-local, end exclusive).

    A *partial* checkpoint holds some rows without a value (skipped by the UDF's error policy,
    NULL fingerprint): it covers its range for the writer, but not for planning or resuming.
    """
    return f"{prefix}_frag-{frag_id}_range-{start}-{end}{PARTIAL if partial else ''}"


def staged_key(job: str) -> str:
    """A new key for a staged-files record: the data files one writer staged for some fragments."""
    return f"{job}_staged-{uuid.uuid4().hex}"


def plan_key(job_id: str) -> str:
    """Key of a job's plan document."""
    return f"plan-{job_id}"


@dataclass(frozen=True)
class BatchKey:
    """A parsed batch checkpoint key."""

    prefix: str
    frag_id: int
    start: int
    end: int
    partial: bool = False

    @property
    def key(self) -> str:
        return batch_key(self.prefix, self.frag_id, self.start, self.end, partial=self.partial)


def parse_batch_key(key: str) -> BatchKey | None:
    """Parses a batch key from the right; returns None for keys of other kinds."""
    m = _BATCH_RE.match(key)
    if not m:
        return None
    return BatchKey(m["prefix"], int(m["frag"]), int(m["start"]), int(m["end"]), bool(m["partial"]))


def parse_staged_key(key: str) -> str | None:
    """The job prefix of a staged-files record key (None for keys of other kinds)."""
    m = _STAGED_RE.match(key)
    return m["prefix"] if m else None


# ------------------------------------------------------------------------- stores
class CheckpointStore(ABC):
    """A key -> Arrow table store; values are small record batches or JSON documents."""

    @abstractmethod
    def __setitem__(self, key: str, value: pa.Table | pa.RecordBatch) -> None: ...

    @abstractmethod
    def __getitem__(self, key: str) -> pa.Table: ...

    @abstractmethod
    def __contains__(self, key: str) -> bool: ...

    @abstractmethod
    def list_keys(self, prefix: str = "") -> list[str]: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @property
    def uri(self) -> str | None:
        """Where other processes can open this store, or None if it lives in this process only."""
        return None

    def get_columns(self, key: str, columns: list[str]) -> pa.Table:
        """Some columns of a stored table (a store may read only those)."""
        return self[key].select(columns)

    def put_text(self, key: str, text: str) -> None:
        """Stores a document (plans, staged-files records, stage reports) as a one-row table."""
        import pyarrow as pa

        self[key] = pa.table({"json": [text]})

    def get_text(self, key: str) -> str:
        """Reads back a document written by :meth:`put_text`."""
        return self[key].column("json")[0].as_py()

    def put_model(self, key: str, model: BaseModel) -> None:
        """Stores a typed contract in its JSON encoding."""
        self.put_text(key, model.model_dump_json())

    def get_model(self, key: str, cls: type[M]) -> M:
        """Reads back a typed contract stored with :meth:`put_model`; CorruptCheckpointError if it does not parse."""
        text = self.get_text(key)
        try:
            return cls.model_validate_json(text)
        except ValueError as exc:
            raise CorruptCheckpointError(f"{key} does not hold a {cls.__name__}: {str(exc)[:200]}") from None

    def key_uri(self, key: str) -> str:
        """A URI naming ``key`` in this store (what plan references carry)."""
        if self.uri is None:
            raise ValueError("an in-memory checkpoint store has no URI; use a LanceCheckpointStore")
        return f"{self.uri.rstrip('/')}/{key}{KEY_SUFFIX}"


class InMemoryCheckpointStore(CheckpointStore):
    """A process-local store for unit tests of planning and key logic."""

    def __init__(self) -> None:
        self._data: dict[str, pa.Table] = {}
        self._lock = threading.Lock()

    def __setitem__(self, key: str, value: pa.Table | pa.RecordBatch) -> None:
        import pyarrow as pa

        _check_key(key)
        table = pa.Table.from_batches([value]) if isinstance(value, pa.RecordBatch) else value
        with self._lock:
            self._data[key] = table

    def __getitem__(self, key: str) -> pa.Table:
        with self._lock:
            return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def list_keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._data if k.startswith(prefix))

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)


class LanceCheckpointStore(CheckpointStore):
    """One Lance file per key under a directory or object-store prefix.

    Local writes go to a temporary name and are renamed into place, so a killed writer
    never leaves a truncated checkpoint that looks complete; object stores publish a
    file only when its upload completes.
    """

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        from lance.file import LanceFileSession

        self._local = _local_path(root)
        self._root = self._local if self._local is not None else root.rstrip("/")
        self._storage_options = storage_options
        self._session = LanceFileSession(self._root, storage_options=storage_options)

    @property
    def uri(self) -> str:
        return self._root

    def __setitem__(self, key: str, value: pa.Table | pa.RecordBatch) -> None:
        import pyarrow as pa
        from lance.file import LanceFileWriter

        _check_key(key)
        batches = value.to_batches() if isinstance(value, pa.Table) else [value]
        name = key + KEY_SUFFIX
        if self._local is not None:
            final = os.path.join(self._local, name)
            tmp = os.path.join(self._local, f".tmp-{uuid.uuid4().hex}-{name}")
            os.makedirs(self._local, exist_ok=True)
            with LanceFileWriter(tmp, value.schema) as w:
                for b in batches:
                    w.write_batch(b)
            os.replace(tmp, final)
            return
        with self._session.open_writer(name, schema=value.schema) as w:
            for b in batches:
                w.write_batch(b)

    def __getitem__(self, key: str) -> pa.Table:
        return self._read(key, None)

    def get_columns(self, key: str, columns: list[str]) -> pa.Table:
        return self._read(key, columns)

    def _read(self, key: str, columns: list[str] | None) -> pa.Table:
        """Reads a key; KeyError when absent, CorruptCheckpointError when truncated or unreadable."""
        name = key + KEY_SUFFIX
        if self._local is not None:
            try:
                size = os.path.getsize(os.path.join(self._local, name))
            except FileNotFoundError:
                raise KeyError(key) from None
            if size < _MIN_FILE_BYTES:  # Lance panics on a file too short to hold a footer
                raise CorruptCheckpointError(f"checkpoint {key} in {self._root} is truncated ({size} bytes)")
        try:
            return self._session.open_reader(name, columns=columns).read_all().to_table()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
                raise
            if self._local is None and not self._session.contains(name):
                raise KeyError(key) from None
            raise CorruptCheckpointError(f"checkpoint {key} in {self._root} is unreadable: "
                                         f"{type(exc).__name__}: {lance_reason(exc)}") from None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._session.contains(key + KEY_SUFFIX)

    def list_keys(self, prefix: str = "") -> list[str]:
        if self._local is not None:
            try:
                names = os.listdir(self._local)
            except FileNotFoundError:
                return []
        else:
            names = self._session.list("")
        keys = [n[: -len(KEY_SUFFIX)] for n in names if n.endswith(KEY_SUFFIX) and not n.startswith(".tmp-")]
        return sorted(k for k in keys if k.startswith(prefix) and "/" not in k)

    def delete(self, key: str) -> None:
        if key in self:
            self._session.delete_file(key + KEY_SUFFIX)


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> CheckpointStore:
    """Opens the store a plan refers to."""
    return LanceCheckpointStore(uri, storage_options)


def split_key_uri(key_uri: str) -> tuple[str, str]:
    """Splits a URI made by :meth:`CheckpointStore.key_uri` into ``(store uri, key)``."""
    root, _, name = key_uri.rstrip("/").rpartition("/")
    if not root or not name.endswith(KEY_SUFFIX):
        raise InvalidArgumentError(f"not a plan or checkpoint reference: {key_uri!r} (expected the plan_uri "
                                   "the plan stage returned, '<store>/plan-<job id>.lance')")
    return root, name[: -len(KEY_SUFFIX)]


def _check_key(key: str) -> None:
    if not key or "/" in key or len(key) + len(KEY_SUFFIX) > 255:
        raise ValueError(f"invalid checkpoint key {key!r}: keys are file names (no '/', at most 249 chars)")


def _local_path(uri: str) -> str | None:
    if uri.startswith("file://"):
        return uri[len("file://"):] or "/"
    if "://" in uri:
        return None
    return os.path.abspath(os.path.expanduser(uri))
