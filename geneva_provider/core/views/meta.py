"""Materialized-view metadata: the stored query and the ``geneva::view::*`` schema keys (core).

A view is a normal Lance table whose schema metadata records what it selects from which source
table at which version; its UDF columns carry their pickled UDFs in field metadata like any UDF
column.  The formats follow Geneva's, so they are kept stable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from geneva_provider.core.contracts.models import OutputGroup, output_layout
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fingerprints import fingerprint_column
from geneva_provider.core.functions.udf import UDF

SOURCE_ROW_ID = "__source_row_id"
IS_SET = "__is_set"
ROW_FINGERPRINT = fingerprint_column(None)  # a view row's fingerprint: of every source column the view reads
# The schema-metadata keys; "source_next_row_id": source rows below this id have been considered.
# "pinned" (a view made of a checked-out version): a refresh without a source version stays at the one it holds.
META_QUERY, META_BASE_TABLE, META_BASE_DB_URI, META_BASE_VERSION, META_VERSION, META_SCANNED_ROW_ID, META_PINNED = (
    f"geneva::view::{key}" for key in ("query", "base_table", "base_table_db_uri", "base_table_version", "version",
                                       "source_next_row_id", "pinned"))


class UdfColumnSpec(BaseModel):
    """A view's UDF column as stored in the query: the UDF by name and version, and its inputs."""

    model_config = ConfigDict(extra="forbid")

    udf: str
    version: str
    input_columns: list[str]


class StoredViewQuery(BaseModel):
    """The query as stored in ``geneva::view::query`` (UDFs by name; their code is in field metadata)."""

    model_config = ConfigDict(extra="forbid")

    base_table: str
    base_table_db_uri: str
    where: str | None = None
    columns: dict[str, str] = {}
    udf_columns: dict[str, UdfColumnSpec] = {}
    shuffle: bool = False
    seed: int | None = None
    limit: int | None = None
    offset: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The view's rows among the source rows ``ids`` that match the filter: ordered, then offset and limit."""
        ordered = query_order(ids, self.shuffle, self.seed)
        start = self.offset or 0
        return ordered[start:start + self.limit] if self.limit is not None else ordered[start:]

    def output_groups(self) -> list[OutputGroup]:
        """What a refresh writes: copied columns, each UDF column with its fingerprint, ``__is_set`` with the row's.

        A UDF column has fingerprints of its own inputs, so a refresh runs it only when they change;
        copied columns have none of their own: they are copied again whenever the row's fingerprint
        (of every column the view reads) says the row is stale -- and that fingerprint, with
        ``__is_set``, tells the planner which rows need a refresh at all (:data:`ROW_FINGERPRINT`).
        """
        copied = [OutputGroup(columns=list(self.columns))] if self.columns else []
        return [*copied, *(OutputGroup(columns=[c], fingerprint=fingerprint_column(c)) for c in self.udf_columns),
                OutputGroup(columns=[IS_SET], fingerprint=ROW_FINGERPRINT)]

    def output_columns(self) -> list[str]:
        """The view columns a refresh writes, flat, in the order its column files hold them."""
        return output_layout(self.output_groups(), ROW_FINGERPRINT)

    def source_columns(self) -> list[str]:
        """Every source column the view reads: copied columns and UDF inputs."""
        cols = list(self.columns.values())
        for spec in self.udf_columns.values():
            cols.extend(spec.input_columns)
        return list(dict.fromkeys(cols))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def query_order(ids: np.ndarray, shuffle: bool, seed: int | None) -> np.ndarray:
    """Source row ids in a view's order: ascending (insertion order), or shuffled by ``seed``.

    The shuffled order ranks each row by a hash of the seed and its row id (splitmix64), not by a
    permutation of today's rows, so the order of any set of rows is fixed whatever arrives or leaves
    later: ``offset`` and ``limit`` then mean the same rows at every source version, and rows
    appended later take their place among the others.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if not shuffle:
        return np.sort(ids, kind="stable")
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(seed or 0) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ids[np.argsort(z, kind="stable")]


@dataclass
class ViewQuery:
    """What a materialized view selects from its source table, with the UDF objects themselves."""

    base_table: str
    base_table_db_uri: str
    where: str | None = None
    columns: dict[str, str] = field(default_factory=dict)   # output name -> source column
    udf_columns: dict[str, tuple[UDF, list[str]]] = field(default_factory=dict)  # output name -> (UDF, inputs)
    shuffle: bool = False
    seed: int | None = None
    limit: int | None = None
    offset: int | None = None

    def stored(self) -> StoredViewQuery:
        return StoredViewQuery(
            base_table=self.base_table, base_table_db_uri=self.base_table_db_uri, where=self.where,
            columns=self.columns,
            udf_columns={name: UdfColumnSpec(udf=fn.name, version=fn.version, input_columns=inputs)
                         for name, (fn, inputs) in self.udf_columns.items()},
            shuffle=self.shuffle, seed=self.seed, limit=self.limit, offset=self.offset)

    def to_json(self) -> str:
        """The JSON stored as ``geneva::view::query``."""
        return self.stored().to_json()


@dataclass(frozen=True)
class ViewInfo:
    """A view's schema metadata, parsed."""

    query: StoredViewQuery
    base_table: str
    base_table_db_uri: str
    base_table_version: int
    format: str
    next_row_id: int
    pinned: bool = False

    @property
    def refresh_version(self) -> int | None:
        """The source version a refresh without one refreshes at: the one a pinned view holds; None: the latest."""
        return self.base_table_version if self.pinned else None

    @property
    def stable(self) -> bool:
        """Format "2": ``__source_row_id`` holds stable row ids (format "1": row addresses)."""
        return self.format == "2"


def view_metadata(query: ViewQuery, base_version: int, stable: bool, next_row_id: int, *,
                  pinned: bool = False) -> dict[str, str]:
    """The schema metadata that makes a table a view of ``query`` (``pinned``: it stays at ``base_version``)."""
    return {
        **({META_PINNED: "true"} if pinned else {}),
        META_QUERY: query.to_json(),
        META_BASE_TABLE: query.base_table,
        META_BASE_DB_URI: query.base_table_db_uri,
        META_BASE_VERSION: str(base_version),
        META_VERSION: "2" if stable else "1",
        META_SCANNED_ROW_ID: str(next_row_id),
    }


def view_info(schema_metadata: dict[Any, Any] | None, name: str) -> ViewInfo:
    """The view's stored query and metadata; raises if the table is not a view."""
    md = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
          for k, v in (schema_metadata or {}).items()}
    if META_QUERY not in md:
        raise InvalidArgumentError(f"table '{name}' is not a materialized view")
    return ViewInfo(query=StoredViewQuery.model_validate_json(md[META_QUERY]), base_table=md[META_BASE_TABLE],
                    base_table_db_uri=md[META_BASE_DB_URI], base_table_version=int(md[META_BASE_VERSION]),
                    format=md[META_VERSION], next_row_id=int(md.get(META_SCANNED_ROW_ID, "0")),
                    pinned=md.get(META_PINNED) == "true")


def query_udf_columns(schema_metadata: dict[Any, Any] | None) -> set[str]:
    """The UDF columns a query view's refresh computes (its query's own), none for any other table: unlike the UDF
    columns put on a view with ``add_columns``, which their backfill computes."""
    query = (schema_metadata or {}).get(META_QUERY.encode(), (schema_metadata or {}).get(META_QUERY))
    if query is None:
        return set()
    return set(StoredViewQuery.model_validate_json(query).udf_columns)


def added_udf_columns(schema: Any) -> set[str]:
    """The UDF columns of a table or view that its backfills compute (on a query view: those put on it with
    ``add_columns``, not its query's own, which its refresh computes)."""
    from geneva_provider.core.functions.udf import is_udf_column

    computed = query_udf_columns(schema.metadata)
    return {c for c in schema.names if c not in computed and is_udf_column(schema, c)}
