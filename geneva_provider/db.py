"""A database: a directory (or object-store prefix) of Lance tables, one ``<name>.lance`` each."""

from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

from geneva_provider.errors import InvalidArgumentError, TableNotFoundError
from geneva_provider.table import Table

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class Connection:
    """Opens, creates and drops the Lance tables under one database URI."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = _absolute(uri)
        self.storage_options = storage_options

    def __repr__(self) -> str:  # storage options may hold secrets: never shown
        return f"Connection(uri={self.uri!r})"

    def table_uri(self, name: str) -> str:
        """Where the table ``name`` lives."""
        _check_name(name)
        return f"{self.uri.rstrip('/')}/{name}.lance"

    def table_names(self) -> list[str]:
        """Names of the tables in this database, sorted."""
        from pyarrow import fs

        filesystem, path = fs.FileSystem.from_uri(self.uri if "://" in self.uri else f"file://{self.uri}")
        try:
            infos = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
        except FileNotFoundError:
            return []
        return sorted(i.base_name[: -len(".lance")] for i in infos
                      if i.type == fs.FileType.Directory and i.base_name.endswith(".lance"))

    def create_table(
        self,
        name: str,
        data: Any,
        *,
        mode: str = "create",
        stable_row_ids: bool = True,
        max_rows_per_file: int | None = None,
    ) -> Table:
        """Writes ``data`` (Arrow table, record batches, or a list of dicts) as a new table."""
        import lance

        if mode not in ("create", "overwrite"):
            raise InvalidArgumentError(f"mode must be 'create' or 'overwrite', got {mode!r}")
        if max_rows_per_file is not None and max_rows_per_file <= 0:
            raise InvalidArgumentError(f"max_rows_per_file must be positive, got {max_rows_per_file}")
        if mode == "create" and name in self.table_names():
            raise InvalidArgumentError(f"table '{name}' already exists in {self.uri}; use mode='overwrite'")
        kwargs: dict[str, Any] = {"mode": mode, "enable_stable_row_ids": stable_row_ids,
                                  "storage_options": self.storage_options}
        if max_rows_per_file is not None:
            kwargs["max_rows_per_file"] = max_rows_per_file
        lance.write_dataset(_as_arrow(data), self.table_uri(name), **kwargs)
        return Table(self, name)

    def open_table(self, name: str) -> Table:
        """Opens an existing table; raises TableNotFoundError naming it otherwise."""
        if name not in self.table_names():
            raise TableNotFoundError(f"table '{name}' not found in {self.uri}")
        return Table(self, name)

    def create_materialized_view(self, name: str, query: Any, *, max_rows_per_fragment: int | None = None) -> Table:
        """Creates view ``name`` from ``table.search(None)...`` (placeholders only: call ``refresh()``)."""
        from geneva_provider.views import create_materialized_view

        return create_materialized_view(self, name, query, max_rows_per_fragment=max_rows_per_fragment)

    def drop_table(self, name: str) -> None:
        """Deletes the table and its checkpoints."""
        from pyarrow import fs

        if name not in self.table_names():
            raise TableNotFoundError(f"table '{name}' not found in {self.uri}")
        uri = self.table_uri(name)
        filesystem, path = fs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
        filesystem.delete_dir(path)


def connect(uri: str, storage_options: dict[str, str] | None = None) -> Connection:
    """Connects to a database of Lance tables at ``uri`` (local path or object-store URI)."""
    return Connection(uri, storage_options)


def _as_arrow(data: Any) -> Any:
    if isinstance(data, list):
        return pa.Table.from_pylist(data)
    if isinstance(data, dict):
        return pa.table(data)
    return data


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _TABLE_NAME.match(name):
        raise InvalidArgumentError(f"invalid table name {name!r}: use letters, digits, '_', '-' and '.'")


def _absolute(uri: str) -> str:
    if "://" in uri:
        return uri.rstrip("/")
    path = os.path.abspath(os.path.expanduser(uri))
    os.makedirs(path, exist_ok=True)
    return path
