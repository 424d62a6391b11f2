"""A Lance table with UDF columns: the notebook face of the pipeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from geneva_provider.core.column_names import is_internal_column, user_columns
from geneva_provider.core.errors import (
    ColumnError,
    InvalidArgumentError,
    TableNotFoundError,
)
from geneva_provider.core.filters import check_where, lance_reason
from geneva_provider.core.fingerprints import (
    is_fingerprint_column,
)
from geneva_provider.core.functions.udf import UDF, UdfColumnListing, UnpackedUDF, udf_column_info
from geneva_provider.core.refs import TableRef
from geneva_provider.facade.indexes import IndexMethods

if TYPE_CHECKING:

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from geneva_provider.core.contracts.models import BackfillResult, CompactionResult, ViewCheck
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.core.table_status import TableReport
    from geneva_provider.facade.connection import Connection
    from geneva_provider.facade.job_handle import JobHandle
    from geneva_provider.facade.merge_insert import MergeInsert
    from geneva_provider.facade.query import Query
    from geneva_provider.operations.background import PreparedJob
    from geneva_provider.pipeline.maintenance.cleanup import CleanupResult
    from geneva_provider.pipeline.spark.task_runner import TaskRunner


class Table(IndexMethods):
    """One Lance table.  Every read opens the latest version, so a Table never goes stale -- unless it is
    checked out at a version (:meth:`checkout`): then it reads that version and refuses every write."""

    def __init__(self, conn: Connection, ref: TableRef) -> None:
        self._conn = conn
        self.ref = ref
        self._store: CheckpointStore | None = None
        self._version: int | None = None  # checked out at (None: the latest)

    def __repr__(self) -> str:
        return f"Table(name={self.name!r}, uri={self.uri!r})"

    # ------------------------------------------------------------------ basics
    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def uri(self) -> str:
        return self.ref.uri

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self.ref.storage_options

    @property
    def connection(self) -> Connection:
        return self._conn

    def dataset(self, version: int | None = None) -> Any:
        """The underlying ``lance.LanceDataset`` (latest -- or the version checked out --, or at ``version``).

        Every call of the facade opens the table here, so a handle that outlived ``drop_table``
        fails here with TableNotFoundError naming the table, not Lance's "Dataset ... was not found".
        """
        try:
            return self.ref.dataset(version if version is not None else self._version)
        except (ValueError, OSError):  # a bad version too: a dropped table has none
            if self._conn.catalog.exists(self.name):
                raise
        raise TableNotFoundError(f"table '{self.name}' not found in {self._conn.uri} (dropped since it was opened)")

    @property
    def version(self) -> int:
        return self.dataset().version

    def to_lance(self) -> Any:
        """The ``lance.LanceDataset`` this table reads (the version checked out, else the latest)."""
        return self.dataset()

    def checkout(self, version: int) -> None:
        """Reads the table as it was at ``version`` from now on, as LanceDB's ``checkout``: a read-only view.

        Every read of this handle (``to_arrow``, ``search``, ``count_rows``, ``schema``, ``to_lance``...) sees
        that version; every write (``add``, ``delete``, column changes, ``backfill``, ``refresh``, maintenance)
        is refused with InvalidArgumentError naming the table and the version, changing nothing.  Other
        handles of the table are not affected; :meth:`checkout_latest` ends it.  A version that does not
        exist (or was cleaned up) is InvalidArgumentError naming it.
        """
        self.dataset(version)  # the version exists (InvalidArgumentError naming it), the table too
        self._version = version

    @property
    def checked_out_version(self) -> int | None:
        """The version this handle is checked out at (:meth:`checkout`); None when it reads the latest."""
        return self._version

    def checkout_latest(self) -> None:
        """Back to the latest version (ends :meth:`checkout`): reads see every commit again, writes are allowed."""
        self._version = None

    def _writable(self, what: str) -> None:
        """InvalidArgumentError naming the table and the version when this handle is checked out."""
        if self._version is not None:
            raise InvalidArgumentError(
                f"{what} on table '{self.name}': the table is checked out at version {self._version}, which is "
                "read-only; call checkout_latest() to write")

    @property
    def primary_key(self) -> list[str]:
        """The columns ``create_table(primary_key=...)`` declared to identify a row (Lance's unenforced primary
        key), ``[]`` for none."""
        from geneva_provider.core.primary_key import primary_key

        return primary_key(self.schema)

    @property
    def schema(self) -> pa.Schema:
        return self.dataset().schema

    def count_rows(self, filter: str | None = None) -> int:
        ds = self.dataset()
        check_where(ds, filter, f"table '{self.name}'")
        return ds.count_rows(filter=filter)

    def to_pandas(self, columns: Sequence[str] | None = None, filter: str | None = None) -> Any:
        """The table's rows as a pandas DataFrame (LanceDB's and the reference's ``Table.to_pandas``)."""
        return self.to_arrow(columns, filter).to_pandas()

    def to_arrow(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        """The table's rows (by default every column but the fingerprint columns that track validity)."""
        ds = self.dataset()
        if columns is None:
            columns = [n for n in ds.schema.names if not is_fingerprint_column(n)]
        elif isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise InvalidArgumentError(f"to_arrow on table '{self.name}': columns must be a list of column names, "
                                       f"got {columns!r}")
        unknown = [c for c in columns if c not in ds.schema.names]
        if unknown:
            raise ColumnError(f"column(s) {unknown} not found in table '{self.name}' "
                              f"(columns: {user_columns(ds.schema.names)})")
        check_where(ds, filter, f"table '{self.name}'")
        return ds.to_table(columns=list(columns), filter=filter)

    def add(self, data: Any) -> int:
        """Appends rows (UDF columns may be omitted: they stay NULL until a backfill). Returns the version."""
        import lance

        self._writable("add")
        ds = self.dataset()
        rows = as_arrow(data, f"add to table '{self.name}'")
        internal = [c for c in rows.column_names if is_internal_column(c)]
        if internal:
            raise InvalidArgumentError(f"add to table '{self.name}': column(s) {internal} are the package's own "
                                       "(fingerprints of computed values, view bookkeeping): leave them out")
        rows = conform(rows, ds.schema, f"add to table '{self.name}'")
        try:
            ds = lance.write_dataset(rows, self.uri, mode="append", storage_options=self.storage_options)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"add to table '{self.name}': {lance_reason(exc)}") from None
        return ds.version

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsert:
        """LanceDB's upsert builder, matching rows on ``on`` -- by default the table's primary key
        (:mod:`geneva_provider.facade.merge_insert`): ``.when_matched_update_all()``,
        ``.when_not_matched_insert_all()``, ``.when_not_matched_by_source_delete()``, then ``.execute(rows)``."""
        from geneva_provider.facade.merge_insert import MergeInsert, merge_keys

        what = f"merge_insert into table '{self.name}'"
        self._writable("merge_insert")
        return MergeInsert(self, merge_keys(on, self.primary_key, self.schema, what), as_arrow)

    def delete(self, where: str) -> None:
        """Deletes the rows matching ``where`` (required: delete everything with ``"true"``)."""
        if not isinstance(where, str) or not where.strip():
            raise InvalidArgumentError(f"delete on table '{self.name}' needs a filter, got {where!r}")
        self._writable("delete")
        ds = self.dataset()
        check_where(ds, where, f"table '{self.name}'")
        ds.delete(where)

    # ------------------------------------------------------------------ UDF columns
    def add_columns(self, columns: dict[str, UDF | tuple[UDF, Sequence[str]] | str] | UDF | UnpackedUDF) -> int:
        """Declares UDF columns: metadata-only, every value NULL until backfilled. Returns the version.

        A SQL expression instead of a UDF (``{"c": "cast(NULL as string)"}``, ``{"z": "x * 2"}``) is a plain
        column computed now by Lance, as the reference does (its own commit, before the UDF columns').

        ``{"y": double}`` reads the UDF's own input columns; ``{"y": (double, ["a"])}`` maps its
        parameters onto other columns.  A column that already holds the identical UDF (same version,
        type, inputs and recorded settings: a notebook cell run again) is left as it is, values
        included; a different UDF or a plain column of that name is ColumnError, and nothing changes.

        A multi-output UDF (``-> Columns[T]``) is passed alone, ``add_columns(dims)``: it adds one column
        per field of ``T``, named by the field; ``add_columns(UnpackedUDF(dims, prefix="img_"))`` prefixes
        the names (and unpacks any UDF returning a struct).  Its columns are one group: computed in one
        call per row, backfilled together (``backfill`` of any of them), dropped together.
        """
        from geneva_provider.core.contracts.operations import AddColumns, request

        self._writable("add_columns")
        if isinstance(columns, UDF | UnpackedUDF):
            if isinstance(columns, UDF) and not columns.multi_output:
                raise InvalidArgumentError(
                    f"add_columns on table '{self.name}': UDF '{columns.name}' computes one column; pass "
                    f"{{'<column name>': {columns.name}}} (only a UDF returning Columns[...] is passed alone)")
            unpacked = columns if isinstance(columns, UnpackedUDF) else UnpackedUDF(columns)
            entries = [{"name": unpacked.udf.name, "virtual_column": {"udf": unpacked}}]
        elif not isinstance(columns, Mapping) or not columns:
            raise InvalidArgumentError(f"add_columns on table '{self.name}': no columns given; pass a dict of column "
                                       f"name -> @udf function (or (udf, [input columns])), got {columns!r}")
        else:
            entries = [self._column_entry(column, spec) for column, spec in columns.items()]
        return self._operate(request(AddColumns, id=[self.name], new_columns=entries)).version

    def _column_entry(self, column: str, spec: Any) -> dict[str, Any]:
        """The front door's entry of one ``add_columns`` dict item: an expression, or a UDF (with its inputs)."""
        if isinstance(spec, str):
            return {"name": column, "expression": spec}
        if isinstance(spec, tuple) and (len(spec) != 2 or isinstance(spec[1], str)
                                        or not isinstance(spec[1], Sequence)):
            raise InvalidArgumentError(
                f"add_columns on table '{self.name}': column '{column}' takes a @udf function, a pair "
                f"(udf, [input columns]) or a SQL expression, got {spec!r}")
        fn, inputs = spec if isinstance(spec, tuple) else (spec, None)
        return {"name": column, "virtual_column": {"udf": fn, "input_columns": inputs}}

    def _operate(self, request: Any) -> Any:
        """``request`` run by the front door on this table's database."""
        from geneva_provider.operations import run

        return run(self._conn, request)

    def drop_columns(self, columns: Sequence[str]) -> None:
        """Drops columns (a UDF column with its fingerprint column).

        Refused, changing nothing: the package's own columns (a fingerprint goes with its column),
        every column at once, and a column a remaining UDF column reads (drop both together).
        """
        from geneva_provider.core.contracts.operations import DropColumns, request

        self._writable("drop_columns")
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns or not all(
                isinstance(c, str) for c in columns):
            raise InvalidArgumentError(f"drop_columns on table '{self.name}': columns must be a non-empty list of "
                                       f"column names, got {columns!r}")
        self._operate(request(DropColumns, id=[self.name], columns=list(columns)))

    def alter_columns(self, *alterations: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int:
        """Alters columns, each named by an alteration dict's ``path`` (several dicts, or one list of them).

        ``{"path": "y", "udf": new_udf}`` revises UDF column ``y``: the new UDF (``input_columns``: other
        inputs, default those of the old one) must return the column's type.  Its values stay, and read, as
        the old UDF computed them, but each is *stale* from now on (its fingerprint is seeded with the old
        UDF's version) until a backfill computes it again: ``backfill("y")`` computes every stale row,
        ``backfill("y", where=...)`` those it selects (the others keep their old values, still stale).
        ``rename`` (or Lance's ``name``) renames a column -- a UDF column with its fingerprint column --,
        ``nullable`` and ``data_type`` (of a plain column) change what Lance's ``alter_columns`` changes; the
        values stay.  Every alteration is checked before anything changes (ColumnError / UDFDefinitionError /
        InvalidArgumentError naming the table and column); returns the table's version.
        """
        from geneva_provider.core.contracts.operations import AlterColumns, request

        self._writable("alter_columns")
        subject = f"alter_columns on table '{self.name}'"
        items = list(alterations[0]) if len(alterations) == 1 and isinstance(alterations[0], list | tuple) \
            else list(alterations)
        if not items:
            raise InvalidArgumentError(f"{subject}: no alterations given; pass dicts such as "
                                       "{'path': 'y', 'udf': new_udf} or {'path': 'a', 'rename': 'b'}")
        parsed = []
        for alteration in items:
            path, fn, inputs, change = _alteration(alteration, subject)
            parsed.append({"path": path, "udf": fn, "input_columns": inputs, **change})
        return self._operate(request(AlterColumns, id=[self.name], alterations=parsed)).version

    def udf_columns(self) -> dict[str, dict[str, Any]]:
        """UDF columns of the table: name -> UDF name, version, kind, input columns, and the rows ``rows_valid``,
        ``rows_stale`` (computed from other inputs or by an older version of the UDF: see ``alter_columns``) and
        ``rows_missing`` as :meth:`status` counts them (None on a query view, whose refresh judges its rows)."""
        from geneva_provider.pipeline.table_report import column_states

        states = {c.column: c for c in column_states(self.ref, self.dataset())}
        listed = {}
        for name, listing in self.udf_column_listings().items():
            state = states.get(name)
            listed[name] = {**listing.model_dump(), **{k: getattr(state, k) if state else None
                                                       for k in ("rows_valid", "rows_stale", "rows_missing")}}
        return listed

    def udf_column_listings(self) -> dict[str, UdfColumnListing]:
        """UDF columns of the table as typed listings: name -> UDF name, version, kind and input columns."""
        infos = ((f.name, udf_column_info(f.metadata)) for f in self.schema)
        return {name: info.listing() for name, info in infos if info is not None}

    def status(self) -> TableReport:
        """Each UDF column's rows valid, stale and missing; for a view, the source version it is at and the source
        rows created, updated or deleted since.

        A value is valid while its stored fingerprint equals that of its row's current inputs; a row whose inputs
        were updated since its backfill keeps its old value, counted stale, until the next backfill.  Judged
        here as that backfill's plan judges it -- the inputs are read and fingerprinted in this process, with no
        Spark job and no change to the table.  ``print(tbl.status())`` shows a table.  A handle checked out at a
        version (:meth:`checkout`) reports that version.
        """
        from geneva_provider.pipeline.table_report import table_report

        # TableNotFoundError if the table was dropped
        return table_report(self.ref, self._conn.catalog.resolve, self.dataset())

    # ------------------------------------------------------------------ queries and views
    def search(self, query: Any = None, vector_column_name: str | None = None, query_type: str = "auto",
               fts_columns: str | list[str] | None = None) -> Query:
        """A query over this table: ``where / select / limit / offset``, read with ``to_arrow / to_pandas /
        to_list``, or made a materialized view (``search(None)``).

        ``query`` None reads the rows a view of the query would hold, in its order (every row by default).
        A vector (a list or array of numbers) is a nearest-neighbour search over ``vector_column_name``
        (default: the table's one vector column), as LanceDB's: the ``limit`` (default 10) nearest rows,
        nearest first, with a ``_distance`` column (squared L2 unless ``.distance_type(...)``); ``where``
        filters before the search (``.where(..., prefilter=False)``: after it).  Through the column's vector
        index where it has one (``.nprobes(n)``, ``.refine_factor(r)``; rows added since the index was built
        are searched flat beside it, unless ``.fast_search()``), exact where it has none (Lance's flat search;
        a float64 or integer column ranked in float64).  A string (``query_type="fts"`` or ``"auto"``) is a
        full-text search over the FTS (INVERTED) index of ``fts_columns`` (default: every FTS-indexed column):
        the ``limit`` (default 10) best matches with their ``_score``.  A handle checked out at a version
        (:meth:`checkout`) makes queries of that version, which they keep reading after ``checkout_latest()``,
        and a materialized view of one stays at it.
        """
        from geneva_provider.core.search_query import SearchQuery, fts_index_columns
        from geneva_provider.facade.query import Query, vector_query

        subject = f"search on table '{self.name}'"
        if query_type not in ("auto", "vector", "fts"):
            raise InvalidArgumentError(f"{subject}: query_type must be 'auto', 'vector' or 'fts', got {query_type!r}")
        if vector_column_name is not None and not isinstance(vector_column_name, str):
            raise InvalidArgumentError(f"{subject}: vector_column_name must be a column name, "
                                       f"got {vector_column_name!r}")
        if query is None:
            if query_type != "auto":
                raise InvalidArgumentError(f"{subject}: query_type {query_type!r} needs a query "
                                           f"({'a vector' if query_type == 'vector' else 'a text'})")
            return Query(self, version=self._version)
        if isinstance(query, str) or query_type == "fts":
            if query_type == "vector" or not isinstance(query, str):
                raise InvalidArgumentError(f"{subject}: query_type {query_type!r} takes "
                                           f"{'a vector' if query_type == 'vector' else 'a text'}, got {query!r}")
            columns = [fts_columns] if isinstance(fts_columns, str) else fts_columns
            if columns is not None and (not isinstance(columns, list) or
                                        not all(isinstance(c, str) for c in columns)):
                raise InvalidArgumentError(f"{subject}: fts_columns must be a column name or a list of them, "
                                           f"got {fts_columns!r}")
            # the FTS index is checked now, before anything runs
            fts_index_columns(self.dataset(), SearchQuery(query_type="fts", text=query, fts_columns=columns),
                              subject)
            return Query(self, version=self._version, text=query, fts_columns=columns)
        return vector_query(self, query, vector_column_name, self.dataset())

    def refresh(
        self,
        src_version: int | None = None,
        max_rows_per_fragment: int | None = None,
        *,
        spark: SparkSession | TaskRunner | None = None,
        checkpoint_store: CheckpointStore | None = None,
        progress: bool | None = None,
        refresh_indexes: bool = True,
        **options: Any,
    ) -> BackfillResult:
        """Refreshes this materialized view from its source (only new and stale rows are computed).

        On a chunker or batch-UDTF view (``create_udtf_view``) it expands only the source rows that are
        new or changed (a batch UDTF: reruns the partitions whose rows changed); ``rows_computed`` counts
        the source rows it gave the UDTF.

        ``options`` are the tuning options of :class:`~geneva_provider.core.contracts.options.RefreshOptions`.
        ``progress=False`` shows no progress; by default it shows where the job runs: a notebook widget, a
        terminal bar (Spark's console bar paused meanwhile) or else a log line every few seconds.
        ``refresh_indexes`` (default True): after the commit, every index of the view indexes add-only the
        fragments it no longer covers, with its saved artifacts (the result's ``indexes``); False leaves them
        unindexed (searched by a flat scan).
        """
        from geneva_provider.facade.job_handle import with_progress

        job = self._refresh_job(src_version, max_rows_per_fragment, spark, checkpoint_store, options, refresh_indexes)
        return with_progress(job.store, job.label, job.run, progress)

    def refresh_async(
        self,
        src_version: int | None = None,
        max_rows_per_fragment: int | None = None,
        *,
        spark: SparkSession | TaskRunner | None = None,
        checkpoint_store: CheckpointStore | None = None,
        refresh_indexes: bool = True,
        **options: Any,
    ) -> JobHandle:
        """Starts :meth:`refresh` in a background thread; the handle has ``status()``, ``result()``, ``cancel()``.

        The options are checked before this returns.
        """
        from geneva_provider.operations.dispatch import start

        return start(self._refresh_job(src_version, max_rows_per_fragment, spark, checkpoint_store, options,
                                       refresh_indexes))

    def _refresh_job(self, src_version: int | None, max_rows_per_fragment: int | None, spark: Any,
                     store: CheckpointStore | None, options: dict[str, Any],
                     refresh_indexes: bool = True) -> PreparedJob:
        from geneva_provider.core.contracts.operations import RefreshView, request
        from geneva_provider.operations import prepare

        self._writable("refresh")
        job = f"refresh of view '{self.name}'"
        _check_flag(refresh_indexes, "refresh_indexes", job)
        _check_store(store, job)
        refresh = request(RefreshView, id=[self.name], src_version=src_version,
                          max_rows_per_fragment=max_rows_per_fragment, refresh_indexes=refresh_indexes)
        return prepare(refresh, self._conn.catalog, spark=spark, checkpoint_store=store, options=options)

    def check(self, *, fingerprints: bool = False) -> ViewCheck:
        """Checks that this chunker or batch-UDTF view holds exactly what its UDTF makes of the source version
        it claims: no (``__source_row_id``, ``__chunk_index``) pair twice, no rows of a parent that version
        does not select; with ``fingerprints=True`` also no rows made from another version of their parent
        (a read of every parent's inputs).  Every refresh's verify stage runs the same check (without
        fingerprints).

        Returns what was checked; raises :class:`~geneva_provider.core.errors.VerificationError` naming the
        culprits when the view is not exact, and then the next refresh compares the view with its whole
        source and repairs it.
        """
        from geneva_provider.pipeline.udtf.check import check_view

        return check_view(self.ref, fingerprints=fingerprints, resolve=self._conn.catalog.resolve)

    # ------------------------------------------------------------------ maintenance
    def compact(
        self,
        target_rows_per_fragment: int | None = None,
        *,
        spark: SparkSession | TaskRunner | None = None,
        exclude_live_jobs: bool = True,
        refresh_indexes: bool = True,
        **options: Any,
    ) -> CompactionResult:
        """Rewrites small fragments into bigger ones on Spark (plan on the driver, one Spark task per rewrite).

        ``options`` are ``lance.optimize.CompactionOptions`` (``materialize_deletions``,
        ``max_rows_per_group``, ...), and ``commit_retries`` / ``commit_timeout`` for the commit.
        Fragments that a live backfill or refresh still has to commit are left alone
        (``exclude_live_jobs``), also when the job started while the rewrites ran; the result's
        ``held_by`` names each job and its fragments.  A failed, finished or abandoned job
        holds nothing.  Computed values stay valid: nothing is recomputed.  Lance remaps the table's indexes onto
        the new fragments; with ``refresh_indexes`` (default True) any fragment the remap left uncovered is then
        indexed add-only with the index's saved artifacts (the result's ``indexes``).
        """
        from geneva_provider.pipeline.jobs import compact

        self._writable("compact")
        _check_flag(refresh_indexes, "refresh_indexes", f"compaction of table '{self.name}'")
        if target_rows_per_fragment is not None:
            options["target_rows_per_fragment"] = target_rows_per_fragment
        self.dataset()  # TableNotFoundError if the table was dropped
        return compact(self.ref, options, spark=spark, store=self.checkpoint_store,
                       exclude_live_jobs=exclude_live_jobs, refresh_indexes=refresh_indexes)

    def cleanup_checkpoints(self, older_than: timedelta = timedelta(days=7)) -> CleanupResult:
        """Removes checkpoints and plans that no live job needs and no future job can use.

        Batch checkpoints and staged-files records go once their UDF version, column, fragment or inputs are gone
        or their values are committed; plans once finished (or expired) and older than ``older_than``.
        A running job's checkpoints are never removed.
        """
        from geneva_provider.pipeline.maintenance.cleanup import cleanup_checkpoints

        self._writable("cleanup_checkpoints")
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            shown = str(older_than) if isinstance(older_than, timedelta) else repr(older_than)
            raise InvalidArgumentError(f"cleanup_checkpoints on table '{self.name}': older_than must be a "
                                       f"non-negative datetime.timedelta, got {shown}")
        self.dataset()  # TableNotFoundError if the table was dropped
        return cleanup_checkpoints(self.ref, self.checkpoint_store, older_than)

    # ------------------------------------------------------------------ backfill
    @property
    def checkpoint_store(self) -> CheckpointStore:
        """The default checkpoint store: ``<table>.lance/_checkpoints``."""
        if self._store is None:
            self._store = self.ref.checkpoint_store()
        return self._store

    def backfill(
        self,
        column: str,
        where: str | None = None,
        *,
        spark: SparkSession | TaskRunner | None = None,
        checkpoint_store: CheckpointStore | None = None,
        progress: bool | None = None,
        refresh_indexes: bool = True,
        **options: Any,
    ) -> BackfillResult:
        """Computes ``column`` for the rows that lack it (plan -> apply -> write -> commit -> verify).

        ``options`` are those of :class:`~geneva_provider.core.contracts.options.BackfillOptions`
        (``read_version``, checkpoint and task sizes, ``commit_granularity``, ``concurrency``).
        Runs on ``spark`` (a session, or a task runner such as ``InProcessRunner()``), the active session, or a
        local ``local[*]`` session that the first such call starts and the next ones reuse.
        ``progress=False`` shows no progress; by default it shows where the job runs: a notebook widget, a
        terminal bar (Spark's console bar paused meanwhile) or else a log line every few seconds.
        ``refresh_indexes`` (default True): after the commit, the indexes on the column (on any column of its
        multi-output group) index add-only the fragments the backfill rewrote, with their saved artifacts --
        the same job, its ``seconds["index"]``, its result's ``indexes``; False leaves them unindexed (searched
        by a flat scan until an index refresh).
        """
        from geneva_provider.facade.job_handle import with_progress

        job = self._backfill_job(column, where, spark, checkpoint_store, options, refresh_indexes)
        return with_progress(job.store, job.label, job.run, progress)

    def backfill_async(
        self,
        column: str,
        where: str | None = None,
        *,
        spark: SparkSession | TaskRunner | None = None,
        checkpoint_store: CheckpointStore | None = None,
        refresh_indexes: bool = True,
        **options: Any,
    ) -> JobHandle:
        """Starts :meth:`backfill` in a background thread; the handle has ``status()``, ``result()``, ``cancel()``.

        The column, the filter and the options are checked before this returns.
        """
        from geneva_provider.operations.dispatch import start

        return start(self._backfill_job(column, where, spark, checkpoint_store, options, refresh_indexes))

    def _backfill_job(self, column: str, where: str | None, spark: Any, store: CheckpointStore | None,
                      options: dict[str, Any], refresh_indexes: bool = True) -> PreparedJob:
        from geneva_provider.core.contracts.operations import BackfillColumn, request
        from geneva_provider.operations import prepare

        self._writable("backfill")
        job = f"backfill of table '{self.name}'"
        _check_flag(refresh_indexes, "refresh_indexes", job)
        _check_store(store, job)
        backfill = request(BackfillColumn, id=[self.name], column=column, where=where, refresh_indexes=refresh_indexes)
        return prepare(backfill, self._conn.catalog, spark=spark, checkpoint_store=store, options=options)

    # ------------------------------------------------------------------ errors
    def get_errors(self, job_id: str | None = None, column: str | None = None) -> pa.Table:
        """The rows UDFs failed on (newest first): job, column, fragment, row address, error, traceback, attempts.

        ``outcome`` says what became of the row: ``skipped`` (left NULL by a skip policy), ``failed``
        (it failed the job), or ``recovered`` (a retry succeeded).
        """
        return self._errors(job_id, column).read(job_id, column)

    def get_failed_row_addresses(self, job_id: str | None = None, column: str | None = None) -> list[int]:
        """Row addresses a job (every job: None) left without a value for ``column`` (every column: None)."""
        return self._errors(job_id, column).failed_row_addresses(job_id, column)

    def _errors(self, job_id: str | None, column: str | None) -> Any:
        """The table's error store, once ``column`` and ``job_id`` are known to name a column and a job."""
        from geneva_provider.core.errors import JobNotFoundError
        from geneva_provider.core.store.error_store import ErrorStore
        from geneva_provider.pipeline.stages.job_records import find_record

        names = self.schema.names  # TableNotFoundError if the table was dropped: no errors of it are left
        if column is not None and column not in names:
            raise ColumnError(f"column '{column}' not found in table '{self.name}' (columns: {user_columns(names)})")
        store = ErrorStore(self.uri, self.storage_options)
        if job_id is not None and find_record(self.checkpoint_store, job_id) is None and not store.read(
                job_id).num_rows:
            raise JobNotFoundError(f"no job {job_id!r} on table '{self.name}'")
        return store

    def retry_failed(
        self,
        column: str,
        job_id: str | None = None,
        *,
        udf: UDF | None = None,
        spark: SparkSession | TaskRunner | None = None,
        **options: Any,
    ) -> BackfillResult:
        """Computes again just the rows ``job_id`` (every job: None) left without a value for ``column``.

        Pass the fixed ``udf`` to run it on those rows only: it replaces the column's code but keeps
        the column's recorded version, so the values already computed stay valid (the fix is taken
        to change only the rows that failed).  Rows found valid since are not computed again.
        """
        from geneva_provider.facade.table_errors import failed_rows_where
        from geneva_provider.pipeline.columns.plan_backfill import udf_of
        from geneva_provider.pipeline.schema_changes import UpdateColumns
        from geneva_provider.pipeline.stages.job_records import read_record

        self._writable("retry_failed")
        udf_of(self.dataset(), self.name, column)  # a UDF column of this table, or ColumnError
        by_job = self._errors(job_id, column).failed_rows_by_job(job_id, column)
        swap = UpdateColumns(self.ref, subject=f"retry_failed on table '{self.name}'").swap_udf(column, udf) \
            if udf is not None else None  # checked before anything changes
        if not by_job:
            raise InvalidArgumentError(f"table '{self.name}' column '{column}': no failed rows recorded"
                                       + (f" for job {job_id}" if job_id else ""))
        versions = {job: record.read_version if (record := read_record(self.checkpoint_store, job)) else None
                    for job in by_job}
        where = failed_rows_where(self.dataset, self.name, column, by_job, versions)  # before anything changes
        if swap is not None:
            swap.commit()
        return self.backfill(column, where, spark=spark, **options)


_ALTERATION_KEYS = ("path", "udf", "virtual_column", "input_columns", "rename", "name", "nullable", "data_type")


def _alteration(alteration: Any, subject: str) -> tuple[str, UDF | None, list[str] | None, dict[str, Any]]:
    """One ``alter_columns`` dict as (path, new UDF, its inputs, Lance's changes: rename / nullable / data_type).

    The reference's aliases are taken: ``virtual_column`` for ``udf`` (its older name), ``name`` for ``rename``
    (Lance's).  InvalidArgumentError naming the alteration for an unknown key, a missing path or nothing to do.
    """
    if not isinstance(alteration, Mapping):
        raise InvalidArgumentError(f"{subject}: each alteration is a dict with a 'path', got {alteration!r}")
    unknown = sorted(set(alteration) - set(_ALTERATION_KEYS))
    path = alteration.get("path")
    if unknown or not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"{subject}: alteration {dict(alteration)!r}: " + (
            f"unknown key(s) {unknown} (known: {list(_ALTERATION_KEYS)})" if unknown else
            "'path' must name a column"))
    for key, alias in (("udf", "virtual_column"), ("rename", "name")):
        if key in alteration and alias in alteration:
            raise InvalidArgumentError(f"{subject}: column '{path}': give '{key}' or '{alias}', not both")
    fn = alteration.get("udf", alteration.get("virtual_column"))
    inputs = alteration.get("input_columns")
    if inputs is not None and (isinstance(inputs, str) or not isinstance(inputs, Sequence)):
        raise InvalidArgumentError(f"{subject}: column '{path}': input_columns must be a list of column names, "
                                   f"got {inputs!r}")
    change = {k: v for k, v in (("rename", alteration.get("rename", alteration.get("name"))),
                                ("nullable", alteration.get("nullable")),
                                ("data_type", alteration.get("data_type"))) if v is not None}
    return path, fn, list(inputs) if inputs is not None else None, change


def _check_flag(value: Any, name: str, job: str) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{job}: {name} must be True or False, got {value!r}")


def _check_store(store: Any, job: str) -> None:
    from geneva_provider.core.store.checkpoint import CheckpointStore

    if store is not None and not isinstance(store, CheckpointStore):
        raise InvalidArgumentError(f"{job}: checkpoint_store must be a CheckpointStore, got {store!r}")


def as_arrow(data: Any, what: str) -> Any:
    """An Arrow table from a table, record batches, a list of row dicts or a dict of columns.

    InvalidArgumentError naming ``what`` ("add to table 'events'") for anything else, ragged
    columns, or data without columns.
    """
    import pyarrow as pa

    try:
        if isinstance(data, pa.Table):
            table = data
        elif isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data])
        elif isinstance(data, list) and data and all(isinstance(b, pa.RecordBatch) for b in data):
            table = pa.Table.from_batches(data)
        elif isinstance(data, list) and all(isinstance(r, dict) for r in data):
            table = pa.Table.from_pylist(data)
        elif isinstance(data, dict):
            table = pa.table(data)
        elif hasattr(data, "__arrow_c_stream__") or type(data).__name__ == "DataFrame":
            table = pa.table(data)
        else:
            raise InvalidArgumentError(f"{what}: data must be an Arrow table, record batches, a list of row dicts or a "
                                       f"dict of columns, got {type(data).__name__}")
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(f"{what}: the data does not convert to an Arrow table: {exc}") from None
    if table.num_columns == 0:
        raise InvalidArgumentError(f"{what}: the data has no columns")
    return table


def conform(rows: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """``rows`` in ``schema`` (columns it lacks are NULL); InvalidArgumentError naming ``what`` ("add to table
    'events'") and what does not fit."""
    import pyarrow as pa

    unknown = [c for c in rows.column_names if c not in schema.names]
    if unknown:
        raise InvalidArgumentError(f"{what}: column(s) {unknown} are not in the table "
                                   f"(columns: {user_columns(schema.names)})")
    columns = []
    for field in schema:
        if field.name not in rows.column_names:
            columns.append(pa.nulls(rows.num_rows, field.type))
            continue
        try:
            columns.append(rows.column(field.name).cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidArgumentError(f"{what}: column '{field.name}' holds "
                                       f"{rows.column(field.name).type}, which does not convert to the table's "
                                       f"{field.type}: {exc}") from None
    return pa.Table.from_arrays(columns, schema=schema)
