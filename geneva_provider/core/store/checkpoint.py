"""Checkpoint stores: key -> Arrow table stores beside each table (core).

Stages talk to each other only through the store: apply writes one batch checkpoint per
computed range, the writer reads them back and records the files it staged (one record for
many fragments), and plans are documents in the same store.  What the keys are is the store
layout's business (:mod:`geneva_provider.core.store.layout`); a store only keeps them as file names.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.errors import CorruptCheckpointError, InvalidArgumentError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.store.layout import PlanKey

if TYPE_CHECKING:
    import pyarrow as pa
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

KEY_SUFFIX = ".lance"
DOC_SUFFIX = ".json"  # a document of a local store (see LanceCheckpointStore)
_MIN_FILE_BYTES = 40  # a Lance file's footer alone is longer
ROWADDR = "_rowaddr"  # the row-address column of every batch checkpoint
# The Lance file format of what a store writes.  Checkpoints live from an apply to its commit, and writing
# them is a cheap UDF's largest cost: 2.0's plain encodings write a 100,000-row checkpoint with ~40% less
# CPU than the default (2.2 in pylance 14, whose compressive encodings make it ~40% smaller) and read it
# back no slower.  Every version reads, so stores written before keep working.
FILE_VERSION = "2.0"
STRUCT_FILE_VERSION = "2.1"  # 2.0 does not encode a struct's validity: a NULL struct needs 2.1


def file_version(schema: pa.Schema) -> str:
    """The Lance file version a store writes ``schema`` in: 2.0, unless a struct (at any depth) needs 2.1."""
    import pyarrow as pa

    def has_struct(t: pa.DataType) -> bool:
        if pa.types.is_struct(t):
            return True
        return any(has_struct(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False

    return STRUCT_FILE_VERSION if any(has_struct(f.type) for f in schema) else FILE_VERSION


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

    def stamp(self, key: str) -> tuple[int, ...] | None:
        """What changes whenever ``key`` is written again, read without reading the value (a local file's inode,
        modification time and size); None when the store cannot tell cheaply, or the key is absent."""
        return None

    def schema(self, key: str) -> pa.Schema:
        """The schema of a stored table (a store may read only its footer)."""
        return self[key].schema

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

    On a local store a document (:meth:`put_text`: job records, plans, staged-files records, markers) is a plain
    UTF-8 file ``<key>.json`` instead: a job writes and reads some 25 of each, and a one-row Lance file costs
    ~1.3 ms to write and ~1.5 ms to read against ~0.2 and ~0.02 ms for the text (issue 44: ~0.08 s of a 0.2 s
    incremental backfill).  A document written as a Lance file (by an earlier version, or on an object store) is
    still read; a key is one or the other, whichever was written last.
    """

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        self._local = _local_path(root)
        self._root = self._local if self._local is not None else root.rstrip("/")
        self._storage_options = storage_options

    @functools.cached_property
    def _session(self) -> Any:
        """Lance's file session, opened at the first Lance file: a process that reads only documents never imports
        pylance (whose ``pyarrow.dataset`` imports pandas, ~0.3 s)."""
        from lance.file import LanceFileSession

        return LanceFileSession(self._root, storage_options=self._storage_options)

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
            tmp = self._tmp(name)
            with LanceFileWriter(tmp, value.schema, version=file_version(value.schema)) as w:
                for b in batches:
                    w.write_batch(b)
            self._publish(tmp, key, name)
            return
        with self._session.open_writer(name, schema=value.schema, version=file_version(value.schema)) as w:
            for b in batches:
                w.write_batch(b)

    def _tmp(self, name: str) -> str:
        """A new temporary path in the local store for a file to become ``name``."""
        assert self._local is not None
        os.makedirs(self._local, exist_ok=True)
        return os.path.join(self._local, f".tmp-{uuid.uuid4().hex}-{name}")

    def _publish(self, tmp: str, key: str, name: str) -> None:
        """Renames a written temporary file into place as ``name``, and removes the key's other form."""
        assert self._local is not None
        os.replace(tmp, os.path.join(self._local, name))
        other = key + (KEY_SUFFIX if name.endswith(DOC_SUFFIX) else DOC_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self._local, other))

    def _doc_path(self, key: str) -> str | None:
        """Where a local store keeps ``key`` as a document (None on an object store)."""
        return None if self._local is None else os.path.join(self._local, key + DOC_SUFFIX)

    def put_text(self, key: str, text: str) -> None:
        if (path := self._doc_path(key)) is None:
            super().put_text(key, text)
            return
        _check_key(key)
        tmp = self._tmp(key + DOC_SUFFIX)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        self._publish(tmp, key, os.path.basename(path))

    def get_text(self, key: str) -> str:
        if (path := self._doc_path(key)) is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    return f.read()
            except FileNotFoundError:
                pass  # a document written as a Lance file, or no document
            except UnicodeDecodeError:
                raise CorruptCheckpointError(f"checkpoint {key} in {self._root} is unreadable: not UTF-8 text"
                                             ) from None
        return super().get_text(key)

    def __getitem__(self, key: str) -> pa.Table:
        if (path := self._doc_path(key)) is not None and os.path.exists(path):
            import pyarrow as pa

            return pa.table({"json": [self.get_text(key)]})
        return self._read(key, None)

    def get_columns(self, key: str, columns: list[str]) -> pa.Table:
        return self._read(key, columns)

    def stamp(self, key: str) -> tuple[int, ...] | None:
        if self._local is None:
            return None
        for suffix in (DOC_SUFFIX, KEY_SUFFIX):
            try:
                st = os.stat(os.path.join(self._local, key + suffix))
            except OSError:
                continue
            return (st.st_ino, st.st_mtime_ns, st.st_size)  # a write renames a new file into place: a new inode
        return None

    def schema(self, key: str) -> pa.Schema:
        schema: pa.Schema = self._read(key, None, lambda reader: reader.metadata().schema)
        return schema

    def _read(self, key: str, columns: list[str] | None, what: Callable[[Any], Any] | None = None) -> Any:
        """Reads a key (``what`` of its reader: by default its table); KeyError when absent,
        CorruptCheckpointError when truncated or unreadable."""
        name = key + KEY_SUFFIX
        if self._local is not None:
            try:
                size = os.path.getsize(os.path.join(self._local, name))
            except FileNotFoundError:
                raise KeyError(key) from None
            if size < _MIN_FILE_BYTES:  # Lance panics on a file too short to hold a footer
                raise CorruptCheckpointError(f"checkpoint {key} in {self._root} is truncated ({size} bytes)")
        try:
            reader = self._session.open_reader(name, columns=columns)
            return what(reader) if what is not None else reader.read_all().to_table()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
                raise
            if self._local is None and not self._session.contains(name):
                raise KeyError(key) from None
            raise CorruptCheckpointError(f"checkpoint {key} in {self._root} is unreadable: "
                                         f"{type(exc).__name__}: {lance_reason(exc)}") from None

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if (path := self._doc_path(key)) is not None and os.path.exists(path):
            return True
        try:
            return self._session.contains(key + KEY_SUFFIX)
        except RuntimeError as exc:
            if (io_error := _io_error(exc, f"cannot look up {key} in {self._root}")) is None:
                raise
            raise io_error from None

    def list_keys(self, prefix: str = "") -> list[str]:
        if self._local is not None:
            try:
                names = os.listdir(self._local)
            except FileNotFoundError:
                return []
        else:
            names = self._session.list("")
        keys = {n[: -len(suffix)] for n in names if not n.startswith(".tmp-")
                for suffix in (KEY_SUFFIX, DOC_SUFFIX) if n.endswith(suffix)}
        return sorted(k for k in keys if k.startswith(prefix) and "/" not in k)

    def delete(self, key: str) -> None:
        if self._local is not None:  # no lookup first: a marker is removed after every UDF call
            for suffix in (DOC_SUFFIX, KEY_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self._local, key + suffix))
        elif key in self:
            self._session.delete_file(key + KEY_SUFFIX)


def _io_error(exc: RuntimeError, what: str) -> OSError | None:
    """Lance's I/O failure (a ``RuntimeError`` whose message starts ``LanceError(IO)``) as the ``OSError`` it is;
    None for any other ``RuntimeError``.

    The storage failing is not the caller's bug: as an ``OSError`` it is what a retry can fix (the Airflow
    surface's retry policy retries I/O errors, and Lance's file session reports them as ``RuntimeError``).
    """
    if not str(exc).startswith("LanceError(IO)"):
        return None
    return OSError(f"checkpoint store: {what}: {lance_reason(exc)}")


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> CheckpointStore:
    """Opens the store a plan refers to."""
    return LanceCheckpointStore(uri, storage_options)


def split_key_uri(key_uri: str) -> tuple[str, str]:
    """Splits a URI made by :meth:`CheckpointStore.key_uri` into ``(store uri, key)``."""
    root, _, name = key_uri.rstrip("/").rpartition("/")
    if not root or not name.endswith(KEY_SUFFIX):
        raise InvalidArgumentError(f"not a plan or checkpoint reference: {key_uri!r} (expected the plan_uri "
                                   f"the plan stage returned, '<store>/{PlanKey('<job id>').key()}{KEY_SUFFIX}')")
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
