"""Operators for materialized views: create (idempotently) and plan a refresh.

The Spark stages and verify are the backfill operators: a refresh plan is a plan like any other.
"""

from __future__ import annotations

import dataclasses
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
    operation_of,
    option_params,
    parse_options,
    plan_job,
    take_options,
    with_retry_policy,
)
from geneva_provider.operators.links import GenevaJobLink

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
    shared with backfills), each templated, and ``parallelism`` like the backfill plan operator.  A query view's,
    a chunker view's or a batch-UDTF view's refresh alike; planned through the front door
    (``geneva_provider.operations.plan`` of a ``RefreshView`` request), as ``view.refresh()`` plans it.

    :param view: the view's table name (templated); or give ``request``
    :param request: the whole refresh request instead (templated): a ``RefreshView``, its dict (e.g.
        ``"{{ dag_run.conf['request'] }}"`` in a DAG rendering templates as native objects) or its JSON (a
        ``refresh_materialized_view`` operation).  Options given to the operator too are added to the request's
    :param parallelism: Spark task slots the plan sizes its tasks for (default: this worker's CPU count)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("view", "request", *RefreshOptions.names())
    ui_color = "#e8f4f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, view: str | None = None, request: Any = None, parallelism: int | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        job = f"refresh of view {view!r}"
        if (view is None) == (request is None):
            raise InvalidArgumentError(f"{type(self).__name__} (task_id {kwargs.get('task_id')!r}): give view or "
                                       f"request (a refresh_materialized_view request), one of them; got "
                                       f"view={view!r}, request={request!r}")
        options = take_options(RefreshOptions, kwargs, type(self), job)
        check_count(parallelism, "parallelism", job)
        super().__init__(**with_retry_policy(kwargs))
        self.view = view
        self.request = request
        for name, value in options.items():
            setattr(self, name, value)
        self.parallelism = parallelism
        self.lance_conn_id = lance_conn_id
        self._summary: Any = None  # the plan's summary once planned (its lineage)

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.contracts.operations import RefreshView, request

        if self.request is None:
            made = request(RefreshView, id=[self.view])
        else:
            made = operation_of(self.request, (RefreshView,), f"{type(self).__name__} (task_id {self.task_id!r})")
        parsed = dataclasses.asdict(parse_options(RefreshOptions, self, f"refresh of view '{made.table}'"))
        own = {k: parsed.pop(k) for k in ("src_version", "max_rows_per_fragment") if parsed[k] is not None}
        return plan_job(self, context, made.model_copy(update=own),
                        options={k: v for k, v in parsed.items() if v is not None}, parallelism=self.parallelism)


GenevaPlanRefreshOperator.__doc__ = inherit_params(GenevaPlanRefreshOperator.__doc__,
                                                   extra=option_params(RefreshOptions))
