"""A Lance table with UDF columns: the notebook face of the pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from geneva_provider.checkpoint import CheckpointStore, LanceCheckpointStore
from geneva_provider.errors import ColumnError, InvalidArgumentError
from geneva_provider.udf import UDF, udf_column_info

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from geneva_provider.backfill import BackfillResult
    from geneva_provider.db import Connection
    from geneva_provider.query import Query

CHECKPOINT_DIR = "_checkpoints"


class Table:
    """One Lance table.  Every read opens the latest version, so a Table never goes stale."""

    def __init__(self, conn: Connection, name: str) -> None:
        self._conn = conn
        self.name = name
        self._store: CheckpointStore | None = None

    def __repr__(self) -> str:
        return f"Table(name={self.name!r}, uri={self.uri!r})"

    # ------------------------------------------------------------------ basics
    @property
    def uri(self) -> str:
        return self._conn.table_uri(self.name)

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self._conn.storage_options

    def dataset(self, version: int | None = None) -> Any:
        """The underlying ``lance.LanceDataset`` (latest, or at ``version``)."""
        import lance

        return lance.dataset(self.uri, version=version, storage_options=self.storage_options)

    @property
    def version(self) -> int:
        return self.dataset().version

    @property
    def schema(self) -> pa.Schema:
        return self.dataset().schema

    def count_rows(self, filter: str | None = None) -> int:
        return self.dataset().count_rows(filter=filter)

    def to_arrow(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        return self.dataset().to_table(columns=list(columns) if columns is not None else None, filter=filter)

    def add(self, data: Any) -> int:
        """Appends rows (UDF columns may be omitted: they stay NULL until a backfill). Returns the version."""
        import lance

        from geneva_provider.db import _as_arrow

        ds = lance.write_dataset(_as_arrow(data), self.uri, mode="append", storage_options=self.storage_options)
        return ds.version

    def delete(self, where: str) -> None:
        self.dataset().delete(where)

    # ------------------------------------------------------------------ UDF columns
    def add_columns(self, columns: dict[str, UDF | tuple[UDF, Sequence[str]]]) -> int:
        """Declares UDF columns: metadata-only, every value NULL until backfilled. Returns the version.

        ``{"y": double}`` reads the UDF's own input columns; ``{"y": (double, ["a"])}`` maps its
        parameters onto other columns.
        """
        if not columns:
            raise InvalidArgumentError(f"add_columns on table '{self.name}': no columns given")
        ds = self.dataset()
        existing = set(ds.schema.names)
        fields = []
        for column, spec in columns.items():
            fn, inputs = spec if isinstance(spec, tuple) else (spec, None)
            if not isinstance(fn, UDF):
                raise InvalidArgumentError(
                    f"add_columns on table '{self.name}': column '{column}' needs a @udf function, got {fn!r}"
                )
            if column in existing:
                raise ColumnError(f"column '{column}' already exists in table '{self.name}'")
            if inputs is None:
                inputs = fn.input_columns if fn.input_columns is not None else sorted(existing)
            inputs = list(inputs)
            if fn.input_columns is not None and len(inputs) != len(fn.input_columns):
                raise InvalidArgumentError(
                    f"column '{column}': UDF '{fn.name}' takes {len(fn.input_columns)} inputs, got {inputs}"
                )
            missing = [c for c in inputs if c not in existing]
            if missing:
                raise ColumnError(
                    f"column '{column}': UDF '{fn.name}' reads {missing}, not found in table '{self.name}' "
                    f"(columns: {sorted(existing)})"
                )
            fields.append(fn.field(column, inputs))
        ds.add_columns(fields)
        return self.version

    def drop_columns(self, columns: Sequence[str]) -> None:
        ds = self.dataset()
        unknown = [c for c in columns if c not in ds.schema.names]
        if unknown:
            raise ColumnError(f"cannot drop {unknown}: not in table '{self.name}'")
        ds.drop_columns(list(columns))

    def udf_columns(self) -> dict[str, dict[str, Any]]:
        """UDF columns of the table: name -> UDF name, version, kind and input columns."""
        out = {}
        for f in self.schema:
            info = udf_column_info(f.metadata)
            if info is not None:
                info.pop("pickle")
                out[f.name] = info
        return out

    # ------------------------------------------------------------------ views
    def search(self, query: Any = None) -> Query:
        """Starts a view query over this table (``query`` must be None: no vector search here)."""
        from geneva_provider.query import Query

        if query is not None:
            raise InvalidArgumentError("search() builds view queries only; pass None")
        return Query(self)

    def refresh(
        self,
        src_version: int | None = None,
        max_rows_per_fragment: int | None = None,
        spark: SparkSession | None = None,
        checkpoint_store: CheckpointStore | None = None,
    ) -> BackfillResult:
        """Refreshes this materialized view from its source (only new and stale rows are computed)."""
        from geneva_provider.backfill import refresh

        return refresh(self, src_version, max_rows_per_fragment, spark=spark, store=checkpoint_store)

    # ------------------------------------------------------------------ backfill
    @property
    def checkpoint_store(self) -> CheckpointStore:
        """The default checkpoint store: ``<table>.lance/_checkpoints``."""
        if self._store is None:
            self._store = LanceCheckpointStore(f"{self.uri}/{CHECKPOINT_DIR}", self.storage_options)
        return self._store

    def backfill(
        self,
        column: str,
        where: str | None = None,
        read_version: int | None = None,
        checkpoint_size: int | None = None,
        min_checkpoint_size: int | None = None,
        max_checkpoint_size: int | None = None,
        task_size: int | None = None,
        commit_granularity: int | None = None,
        concurrency: int | None = None,
        spark: SparkSession | None = None,
        checkpoint_store: CheckpointStore | None = None,
    ) -> BackfillResult:
        """Computes ``column`` for the rows that lack it (plan -> apply -> write -> commit -> verify).

        Runs on ``spark`` or on a local ``local[*]`` session created for the call.
        """
        from geneva_provider.backfill import BackfillOptions, backfill

        options = BackfillOptions(
            where=where,
            read_version=read_version,
            checkpoint_size=checkpoint_size,
            min_checkpoint_size=min_checkpoint_size,
            max_checkpoint_size=max_checkpoint_size,
            task_size=task_size,
            commit_granularity=commit_granularity,
            concurrency=concurrency,
        )
        return backfill(self, column, options, spark=spark, store=checkpoint_store)
