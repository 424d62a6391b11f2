"""Operators for materialized views: create (idempotently) and plan a refresh.

The Spark stages and verify are the backfill operators: a refresh plan is a plan like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from geneva_provider.core.contracts.options import RefreshOptions, check_count
from geneva_provider.core.docstrings import inherit_params
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.errors import fails_without_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.openlineage import LineageMixin
from geneva_provider.operators._common import (
    check_dict,
    import_udf,
    option_params,
    parse_options,
    take_options,
    with_retry_policy,
)
from geneva_provider.operators.links import GenevaJobLink, push_job_link

VIEW_COLUMNS_EXPECTED = '{"out": "source_column"} or {"out": "my_pkg.udfs:embed"}'


class GenevaCreateMaterializedViewOperator(LineageMixin, BaseOperator):
    """Creates a materialized view; leaves an identical existing view alone, refuses a different one.

    :param view: the view's table name (templated)
    :param source_table: the table the view reads (templated)
    :param columns: ``{"out": "source_column"}`` or ``{"out": "my_pkg.udfs:embed"}`` (a ``module:name``
        reference is a UDF column).
    :param where: SQL filter of the source rows the view holds (templated)
    :param shuffle: the view's rows in a random order (``seed`` fixes it)
    :param seed: the shuffle's seed
    :param limit: at most this many rows
    :param offset: skip this many rows first
    :param max_rows_per_fragment: rows per fragment of the view
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("view", "source_table", "where")
    ui_color = "#e8f4f8"

    def __init__(self, *, view: str, source_table: str, columns: dict[str, str], where: str | None = None,
                 shuffle: bool = False, seed: int | None = None, limit: int | None = None, offset: int | None = None,
                 max_rows_per_fragment: int | None = None, lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        _check_definition(f"materialized view {view!r}", columns, shuffle)  # neither is templated: check now
        super().__init__(**with_retry_policy(kwargs))
        self.view = view
        self.source_table = source_table
        self.columns = columns
        self.where = where
        self.shuffle = shuffle
        self.seed = seed
        self.limit = limit
        self.offset = offset
        self.max_rows_per_fragment = max_rows_per_fragment
        self.lance_conn_id = lance_conn_id

    def lineage_tables(self) -> tuple[str, str]:
        return self.source_table, self.view

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.views.meta import view_info

        db = LanceHook(self.lance_conn_id).database
        source = db.open_table(self.source_table)
        query = source.search(None).where(self.where or None).select(
            {out: import_udf(ref, out) if ":" in ref else ref for out, ref in self.columns.items()})
        if self.shuffle:
            query = query.shuffle(seed=self.seed)
        query = query.offset(self.offset).limit(self.limit)
        wanted = query.spec.stored()
        if db.catalog.exists(self.view):
            view = db.open_table(self.view)
            existing = view_info(view.schema.metadata, self.view).query
            if existing != wanted:
                raise InvalidArgumentError(
                    f"view '{self.view}' exists with a different definition: {existing.to_json()}; "
                    "drop it to redefine it")
            self.log.info("View '%s' exists with the same definition: left as it is", self.view)
            self._record_view(source, view)
            return {"view": self.view, "created": False, "rows": view.count_rows(), "version": view.version}
        view = db.create_materialized_view(self.view, query, max_rows_per_fragment=self.max_rows_per_fragment)
        self._record_view(source, view)
        self.log.info("Created view '%s' with %d placeholder rows", self.view, view.count_rows())
        return {"view": self.view, "created": True, "rows": view.count_rows(), "version": view.version}


    def _record_view(self, source: Any, view: Any) -> None:
        """The view's lineage: its columns from the source's, at the source version it was made of."""
        from geneva_provider.core.lineage import query_view_lineage
        from geneva_provider.core.views.meta import view_info

        info = view_info(view.schema.metadata, self.view)
        self.record_lineage(query_view_lineage(source.uri, info.base_table_version, source.schema.names, view.uri,
                                               view.schema, info.query), view.version)


def _check_definition(job: str, columns: Any, shuffle: Any) -> None:
    """Rejects a ``columns`` or ``shuffle`` no view can be made of, naming the argument and what it takes."""
    for out, ref in check_dict(columns, "columns", job, VIEW_COLUMNS_EXPECTED).items():
        if not isinstance(ref, str):
            raise InvalidArgumentError(f"{job}: column '{out}' takes a source column name or a UDF reference "
                                       f"'pkg.mod:name', got {ref!r}")
    if not isinstance(shuffle, bool):  # "no" would be truthy: a shuffled view nobody asked for
        raise InvalidArgumentError(f"{job}: shuffle must be True or False (the seed goes in seed=), got {shuffle!r}")


class GenevaPlanRefreshOperator(LineageMixin, BaseOperator):
    """Plans a view refresh: appends placeholders for new source rows, stores the plan, returns its summary.

    Takes every refresh option (``src_version``, ``max_rows_per_fragment`` and the tuning options
    shared with backfills), each templated, and ``parallelism`` like the backfill plan operator.

    :param view: the view's table name (templated)
    :param parallelism: Spark task slots the plan sizes its tasks for (default: this worker's CPU count)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("view", *RefreshOptions.names())
    ui_color = "#e8f4f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, view: str, parallelism: int | None = None, lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        job = f"refresh of view {view!r}"
        options = take_options(RefreshOptions, kwargs, type(self), job)
        check_count(parallelism, "parallelism", job)
        super().__init__(**with_retry_policy(kwargs))
        self.view = view
        for name, value in options.items():
            setattr(self, name, value)
        self.parallelism = parallelism
        self.lance_conn_id = lance_conn_id
        self._summary: Any = None  # the plan's summary once planned (its lineage)

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.pipeline.columns.plan_refresh import plan_refresh

        db = LanceHook(self.lance_conn_id).database
        options = parse_options(RefreshOptions, self, f"refresh of view '{self.view}'")
        self._summary = summary = plan_refresh(db.catalog.ref(self.view), options, resolve=db.catalog.resolve,
                                               parallelism=self.parallelism, airflow_run_id=context.get("run_id"))
        self.log.info("Refresh plan %s for view '%s': %s", summary.job_id, self.view, summary.describe())
        push_job_link(context, summary.job_id, summary.table, self.lance_conn_id)
        return summary.to_xcom()


GenevaPlanRefreshOperator.__doc__ = inherit_params(GenevaPlanRefreshOperator.__doc__,
                                                   extra=option_params(RefreshOptions))
