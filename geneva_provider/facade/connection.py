"""A database of Lance tables: a directory (or object-store prefix), or any Lance namespace."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from geneva_provider.core.catalog import DIRECTORY, Catalog
from geneva_provider.core.errors import GenevaError, InvalidArgumentError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.primary_key import key_columns, keyed

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.core.contracts.models import BackfillResult, JobRecord
    from geneva_provider.core.manifest import GenevaManifest, SparkCluster
    from geneva_provider.core.views.meta import ViewQuery
    from geneva_provider.facade.contexts import ExecutionContext
    from geneva_provider.facade.followers import FollowedStep
    from geneva_provider.facade.query import Query
    from geneva_provider.facade.table import Table
    from geneva_provider.pipeline.followers import FollowerPlan, FollowEvent


class Connection:
    """Opens, creates and drops the tables of one database, through its Lance namespace."""

    def __init__(self, uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None, *,
                 namespace_impl: str = DIRECTORY, namespace_properties: dict[str, str] | None = None) -> None:
        if isinstance(uri, os.PathLike):  # a pathlib.Path, as the reference takes
            uri = os.fspath(uri)
        if not isinstance(uri, str) or not uri.strip():
            raise InvalidArgumentError(f"connect: uri must be a database path or URI, got {uri!r}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InvalidArgumentError("connect: storage_options must be a dict of strings")
        if namespace_properties is not None and not isinstance(namespace_properties, dict):
            raise InvalidArgumentError(f"connect: namespace_properties must be a dict of strings, got "
                                       f"{namespace_properties!r}")
        self.catalog = Catalog(uri, storage_options, impl=namespace_impl, properties=namespace_properties)
        self.uri: str = self.catalog.uri
        # A directory that does not exist yet is made by the first write; a file can never hold tables.
        if namespace_impl == DIRECTORY and "://" not in self.uri and os.path.exists(self.uri) and not os.path.isdir(
                self.uri):
            raise InvalidArgumentError(f"connect: {uri!r} is a file, not a database directory")
        self.storage_options: dict[str, str] | None = self.catalog.storage_options
        self._manifests: dict[str, GenevaManifest] = {}
        self._clusters: dict[str, SparkCluster] = {}

    def __repr__(self) -> str:  # storage options may hold secrets: never shown
        return f"Connection(uri={self.uri!r})"

    def is_remote(self) -> bool:
        """Whether the tables are reached through a server (a ``"rest"`` Lance namespace) rather than read directly.

        The reference answers True for a LanceDB Cloud (``db://``) connection, whose tables live behind a
        server.  Here every job reads and writes Lance files itself: a local directory or an object-store
        prefix (``s3://``, ``gs://``, ``az://``) is False -- the storage is remote, the connection is not.
        """
        return self.catalog.impl == "rest"

    def table_uri(self, name: str) -> str:
        """Where the existing table ``name`` lives."""
        return self.catalog.ref(name).uri

    def table_names(self) -> list[str]:
        """Names of the tables in this database, sorted."""
        return self.catalog.names()

    def create_table(
        self,
        name: str,
        data: Any = None,
        *,
        schema: Any = None,
        mode: str = "create",
        storage_options: dict[str, str] | None = None,
        stable_row_ids: bool = True,
        max_rows_per_file: int | None = None,
        primary_key: str | list[str] | None = None,
    ) -> Table:
        """Writes ``data`` (Arrow table, record batches, a list of dicts or a dict of columns) as table ``name``.

        Without ``data``, ``schema`` (a ``pa.Schema``, a LanceModel or a pydantic model) makes an empty
        table; with both, the data is cast to the schema.  ``mode`` is "create" (TableExistsError naming
        the table if it exists), "overwrite" (replaces it) or "exist_ok" (opens the existing table, checking
        that ``schema``'s columns are in it with their types; ``data`` is then not written).
        ``storage_options`` are added to the connection's for this table.  ``primary_key`` (a column or a
        list of them) declares the columns that identify a row, as Lance's unenforced primary key (what its
        ``merge_insert`` matches rows on by default; ``table.primary_key`` lists it): each must be a column of
        plain values, without NULLs or duplicates in ``data`` (InvalidArgumentError naming it, nothing
        created); with "exist_ok" the existing table must declare the same key.
        """
        from geneva_provider.facade.table import Table

        what = f"create_table '{name}'"
        if mode not in _MODES:
            raise InvalidArgumentError(f"{what}: mode must be one of {list(_MODES)}, got {mode!r}")
        if max_rows_per_file is not None and (not isinstance(max_rows_per_file, int)
                                              or isinstance(max_rows_per_file, bool) or max_rows_per_file <= 0):
            raise InvalidArgumentError(f"{what}: max_rows_per_file must be a positive integer, got "
                                       f"{max_rows_per_file!r}")
        if not isinstance(stable_row_ids, bool):
            raise InvalidArgumentError(f"{what}: stable_row_ids must be True or False, got {stable_row_ids!r}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InvalidArgumentError(f"{what}: storage_options must be a dict of strings")
        keys = key_columns(primary_key, what) if primary_key is not None else None
        target = arrow_schema(schema, what) if schema is not None else None
        if data is None and target is None:
            raise InvalidArgumentError(f"{what}: pass data, a schema, or both")
        catalog = self.catalog if not storage_options else Catalog(
            self.uri, {**(self.storage_options or {}), **storage_options}, impl=self.catalog.impl,
            properties=self.catalog._properties)
        if mode == "exist_ok" and catalog.exists(name):
            table = Table(self, catalog.ref(name))
            if target is not None:
                check_schema_fits(target, table.schema, what)
            if keys is not None and table.primary_key != keys:
                raise InvalidArgumentError(f"{what}: the existing table's primary key is {table.primary_key}, not "
                                           f"{keys}")
            return table
        rows = _rows(data, target, what)
        if keys is not None:
            rows = keyed(rows, keys, what)
        options: dict[str, Any] = {"enable_stable_row_ids": stable_row_ids}
        if max_rows_per_file is not None:
            options["max_rows_per_file"] = max_rows_per_file
        try:
            ref = catalog.create(name, rows, mode="overwrite" if mode == "overwrite" else "create", **options)
        except (OSError, ValueError, TypeError) as exc:  # the catalog removes what a failed create left
            if isinstance(exc, GenevaError):
                raise
            types = ", ".join(f"'{f.name}' ({f.type})" for f in rows.schema)
            raise InvalidArgumentError(f"{what}: Lance cannot store the data (columns {types}): "
                                       f"{lance_reason(exc, 300)}") from None
        return Table(self, ref)

    def open_table(self, name: str, version: int | None = None) -> Table:
        """Opens an existing table; raises TableNotFoundError naming it otherwise.  With ``version``, the handle is
        checked out at it (:meth:`Table.checkout`): it reads that version and refuses writes."""
        from geneva_provider.facade.table import Table

        table = Table(self, self.catalog.ref(name))
        if version is not None:
            table.checkout(version)
        return table

    def create_materialized_view(self, name: str, query: Query, *, max_rows_per_fragment: int | None = None,
                                 refresh_on_change: bool = False) -> Table:
        """Creates view ``name`` from ``table.search(None)...`` (placeholders only: call ``refresh()``).

        ``refresh_on_change=True`` is recorded on the view: a DAG of ``table_change_dag`` over its source
        refreshes it after each change of the source (the reference's "auto-refresh").  A query of a handle
        checked out at a version makes a view of that version which stays at it: ``refresh()`` refreshes it at
        that version, ``refresh(src_version=N)`` moves it to N (it cannot refresh on change).
        """
        from geneva_provider.facade.query import Query

        if not isinstance(query, Query):
            raise InvalidArgumentError(f"create_materialized_view '{name}': query must be a Query "
                                       f"(table.search(None).select(...)), got {query!r}")
        spec = query.view_source(f"create_materialized_view '{name}'")
        _check_flag(refresh_on_change, "refresh_on_change", f"create_materialized_view '{name}'")
        return self._create_view(name, query, spec, None, max_rows_per_fragment, refresh_on_change)

    def create_udtf_view(self, name: str, source: Query | Table, udtf: Any, *,
                         max_rows_per_fragment: int | None = None, refresh_on_change: bool = False) -> Table:
        """Creates a chunker (1:N) or batch-UDTF (N:M) view ``name`` of ``udtf`` over ``source``.

        ``source`` is ``table.search(None)`` with an optional ``.where(...)`` and ``.select([...])`` (the
        parent columns each chunk carries), or a table.  The view is empty until ``refresh()``, which
        expands only the source rows that are new or changed since the last one.
        """
        from geneva_provider.facade.query import Query
        from geneva_provider.facade.table import Table

        if isinstance(source, Table):
            source = source.search(None)
        if not isinstance(source, Query):
            raise InvalidArgumentError(f"create_udtf_view '{name}': source must be a query (table.search(None)"
                                       f".where(...).select([...])) or a table, got {source!r}")
        spec = source.view_source(f"create_udtf_view '{name}'")
        _check_flag(refresh_on_change, "refresh_on_change", f"create_udtf_view '{name}'")
        return self._create_view(name, source, spec, udtf, max_rows_per_fragment, refresh_on_change)

    def _create_view(self, name: str, query: Query, spec: ViewQuery, udtf: Any, max_rows_per_fragment: int | None,
                     refresh_on_change: bool) -> Table:
        """The view made by the front door (``CreateView``), opened."""
        from geneva_provider.core.contracts.operations import CreateView, SourceQuery, request
        from geneva_provider.core.contracts.options import check_count
        from geneva_provider.operations import run

        # Before the request model, which would read "10" as 10: a string is a caller's mistake, named as such.
        check_count(max_rows_per_fragment, "max_rows_per_fragment", f"view '{name}'")

        run(self, request(CreateView, id=[name], kind="query" if udtf is None else "udtf",
                          source_query=SourceQuery.of(spec, query.version), udtf_spec=udtf,
                          max_rows_per_fragment=max_rows_per_fragment, auto_refresh=refresh_on_change))
        return self.open_table(name)

    def refresh(self, name: str, *args: Any, **kwargs: Any) -> BackfillResult:
        """Refreshes the materialized view ``name`` (the reference's ``db.refresh``): ``open_table(name).refresh(...)``,
        with the same arguments and result."""
        return self.open_table(name).refresh(*args, **kwargs)

    def followers(self, table: str | FollowEvent) -> FollowerPlan:
        """What follows a change of ``table`` (or any follower event, e.g. ``ColumnBackfilled``): the steps, in
        order, that ``table_change_dag(table)`` runs -- its ``auto_backfill`` columns, its ``refresh_on_change``
        views (each after its source) and their own ``auto_backfill`` columns -- read from the tables' schemas."""
        from geneva_provider.facade.followers import followers

        return followers(self, table)

    def follow(self, table: str | FollowEvent, *, spark: Any = None,
               progress: bool | None = None) -> list[FollowedStep]:
        """Runs in this process what ``table_change_dag(table)`` runs after a change of ``table``: each step of
        :meth:`followers` in order (``spark``: a session or a task runner), stopping at the first that fails.
        Returns the steps run with their results."""
        from geneva_provider.facade.followers import follow

        return follow(self, table, spark=spark, progress=progress)

    # ------------------------------------------------------------------ execution contexts
    def define_manifest(self, name: str, manifest: GenevaManifest) -> None:
        """Names ``manifest`` for ``context(manifest=name)`` (kept by this connection, for this process)."""
        from geneva_provider.core.manifest import GenevaManifest

        _check_name(name, "define_manifest")
        if not isinstance(manifest, GenevaManifest):
            raise InvalidArgumentError(f"define_manifest '{name}': manifest must be a GenevaManifest, got "
                                       f"{manifest!r}")
        self._manifests[name] = manifest

    def define_cluster(self, name: str, cluster: str | SparkCluster) -> None:
        """Names ``cluster`` -- a Spark master, an ``sc://`` URL or a :class:`SparkCluster` -- for
        ``context(cluster=name)`` (kept by this connection, for this process)."""
        from geneva_provider.core.manifest import SparkCluster
        from geneva_provider.facade.contexts import as_cluster

        _check_name(name, "define_cluster")
        found = as_cluster(cluster, f"define_cluster '{name}'")
        if not isinstance(found, SparkCluster):
            raise InvalidArgumentError(f"define_cluster '{name}': cluster must be a Spark master, an sc:// URL or "
                                       "a SparkCluster (pass a running session to context() itself)")
        self._clusters[name] = found

    def context(self, cluster: Any = None, manifest: Any = None) -> ExecutionContext:
        """A context manager whose jobs run on ``cluster`` with ``manifest``'s code shipped to its workers.

        ``cluster``: a name given to :meth:`define_cluster`, a Spark master (``local[4]``,
        ``spark://host:7077``; ``local[*]`` when None), an ``sc://`` Spark Connect URL, a
        :class:`SparkCluster`, or a running SparkSession (used, never stopped).  ``manifest``: a name given
        to :meth:`define_manifest` or a :class:`GenevaManifest`.  Inside ``with db.context(...):`` every
        backfill, refresh and compaction without ``spark=`` runs on the context's session; leaving it stops
        the session only if entering it started one.
        """
        from geneva_provider.facade.contexts import ExecutionContext, as_cluster, as_manifest

        what = "context"
        if isinstance(cluster, str) and cluster in self._clusters:
            cluster = self._clusters[cluster]
        if isinstance(manifest, str):
            if manifest not in self._manifests:
                raise InvalidArgumentError(f"{what}: no manifest named {manifest!r} (defined: "
                                           f"{sorted(self._manifests)}); define it with db.define_manifest")
            manifest = self._manifests[manifest]
        return ExecutionContext(as_cluster(cluster, what), as_manifest(manifest, what), what)

    @staticmethod
    def local_context(manifest: GenevaManifest | None = None, **options: Any) -> ExecutionContext:
        """A context on a local Spark session (:func:`geneva_provider.local_context`)."""
        from geneva_provider.facade.contexts import local_context

        return local_context(manifest, **options)

    @staticmethod
    def local_ray_context(manifest: GenevaManifest | None = None, **options: Any) -> ExecutionContext:
        """The reference's name for :meth:`local_context`: a local Spark session, no Ray (Ray's own settings are
        ignored, with a warning)."""
        from geneva_provider.facade.contexts import local_ray_context

        return local_ray_context(manifest, **options)

    # ------------------------------------------------------------------ job records
    def list_jobs(self, table: str | None = None, *, status: str | None = None, kind: str | None = None,
                  table_name: str | None = None) -> list[JobRecord]:
        """Records of the backfills, refreshes and compactions run on this database's tables, newest first.

        ``table`` (or, as the reference names it, ``table_name``), ``status`` (PENDING, RUNNING, DONE, FAILED,
        CANCELLED, ABANDONED) and ``kind`` (backfill, refresh, compaction, udtf: a chunker or batch-UDTF view refresh)
        narrow the list.  A PENDING or RUNNING job whose process stopped heartbeating (killed) is listed
        ABANDONED, with the stage and counts it had reached.  Each record also answers to the reference's
        field names (``table_name``, ``column_name``, ``job_type``, ``launched_at``, ``completed_at``,
        ``metrics``).
        """
        from geneva_provider.core.contracts.operations import ListJobs, request
        from geneva_provider.operations import run

        if table_name is not None:
            if table is not None and table != table_name:
                raise InvalidArgumentError(f"list_jobs: table {table!r} and table_name {table_name!r} differ: "
                                           "pass one of them")
            table = table_name
        if table is not None and (not isinstance(table, str) or not table):
            raise InvalidArgumentError(f"list_jobs: table_name must be a table's name, got {table!r}")
        return run(self, request(ListJobs, id=[table] if table else None, status=status, kind=kind)).jobs

    def get_job(self, job_id: str) -> JobRecord:
        """The record of job ``job_id`` (a DONE one for a job that had nothing to do); JobNotFoundError naming it
        otherwise."""
        from geneva_provider.core.contracts.operations import GetJob, request
        from geneva_provider.operations import run

        return run(self, request(GetJob, job_id=job_id)).job

    def cancel_job(self, job_id: str) -> JobRecord:
        """Asks the running job ``job_id`` to stop, from any process; returns its record as it was.

        A backfill or refresh run by ``Table.backfill`` / ``refresh`` (or ``*_async``) in another process sees
        the request within a second, cancels its tasks and records itself CANCELLED;
        nothing it had not committed lands.  A job whose stages run as Airflow tasks does not watch for the
        request: stop it from Airflow.  JobNotFoundError for an unknown job, InvalidArgumentError for one that
        is no longer running.
        """
        from geneva_provider.core.contracts.operations import CancelJob, request
        from geneva_provider.operations import run

        return run(self, request(CancelJob, job_id=job_id)).job

    def drop_table(self, name: str) -> None:
        """Deletes the table and its checkpoints."""
        self.catalog.drop(name)


def connect(uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None, *,
            namespace_impl: str = DIRECTORY, namespace_properties: dict[str, str] | None = None) -> Connection:
    """Connects to a database of Lance tables at ``uri`` (local path, ``pathlib.Path`` or object-store URI).

    ``namespace_impl`` names another Lance namespace implementation ("rest", or a class path)
    and ``namespace_properties`` its properties; the default is a directory of ``<name>.lance``.
    """
    return Connection(uri, storage_options, namespace_impl=namespace_impl, namespace_properties=namespace_properties)


_MODES = ("create", "overwrite", "exist_ok")


def _check_flag(value: Any, name: str, what: str) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what}: {name} must be True or False, got {value!r}")


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"{what}: name must be a non-empty string, got {name!r}")


def arrow_schema(schema: Any, what: str) -> pa.Schema:
    """``schema`` as Arrow: a ``pa.Schema``, a LanceModel (``to_arrow_schema()``) or a pydantic model's fields."""
    import pyarrow as pa
    from pydantic import BaseModel

    from geneva_provider.core.errors import UDFDefinitionError
    from geneva_provider.core.functions.arrow_types import annotated_field

    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, type) and callable(getattr(schema, "to_arrow_schema", None)):
        converted = schema.to_arrow_schema()
        if isinstance(converted, pa.Schema):
            return converted
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            return pa.schema([annotated_field(n, f.annotation, f"{what}: schema field '{n}'", "use a pa.Schema")
                              for n, f in schema.model_fields.items()])
        except UDFDefinitionError as exc:
            raise InvalidArgumentError(str(exc)) from None
    raise InvalidArgumentError(f"{what}: schema must be a pyarrow Schema, a LanceModel or a pydantic model, "
                               f"got {schema!r}")


def check_schema_fits(wanted: pa.Schema, actual: pa.Schema, what: str) -> None:
    """InvalidArgumentError naming the columns of ``wanted`` that ``actual`` lacks or holds with another type."""
    misfits = [f"'{f.name}' ({f.type}: " + ("missing)" if f.name not in actual.names else
                                            f"the table holds {actual.field(f.name).type})")
               for f in wanted if f.name not in actual.names or actual.field(f.name).type != f.type]
    if misfits:
        raise InvalidArgumentError(f"{what}: the existing table does not fit the schema given: {', '.join(misfits)}")


def _rows(data: Any, schema: pa.Schema | None, what: str) -> pa.Table:
    """The rows to write: ``data`` as Arrow (cast to ``schema`` if given), or an empty table of ``schema``."""
    from geneva_provider.core.column_names import check_column_name
    from geneva_provider.facade.table import as_arrow, conform

    if data is None:
        assert schema is not None
        rows = schema.empty_table()
    else:
        rows = as_arrow(data, what)
        if schema is not None:
            rows = conform(rows, schema, what)
    for column in rows.column_names:
        check_column_name(column, what)
    duplicates = sorted({c for c in rows.column_names if rows.column_names.count(c) > 1})
    if duplicates:
        raise InvalidArgumentError(f"{what}: duplicate column name(s) {duplicates}")
    return rows
