"""Operators for materialized views: create (idempotently) and plan a refresh.

The Spark stages and verify are the backfill operators: a refresh plan is a plan like any other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from geneva_provider.errors import InvalidArgumentError
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import import_udf
from geneva_provider.plan import BackfillOptions


class GenevaCreateMaterializedViewOperator(BaseOperator):
    """Creates a materialized view; leaves an identical existing view alone, refuses a different one.

    :param view: the view's table name.
    :param source_table: the table the view reads.
    :param columns: ``{"out": "source_column"}`` or ``{"out": "my_pkg.udfs:embed"}`` (a ``module:name``
        reference is a UDF column).
    :param where, shuffle, seed, limit, offset: the query.
    """

    template_fields: Sequence[str] = ("view", "source_table", "where")
    ui_color = "#e8f4f8"

    def __init__(self, *, view: str, source_table: str, columns: dict[str, str], where: str | None = None,
                 shuffle: bool = False, seed: int | None = None, limit: int | None = None, offset: int | None = None,
                 max_rows_per_fragment: int | None = None, lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
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

    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.views import view_info

        db = LanceHook(self.lance_conn_id).get_conn()
        query = db.open_table(self.source_table).search(None).where(self.where).select(
            {out: import_udf(ref) if ":" in ref else ref for out, ref in self.columns.items()})
        if self.shuffle:
            query = query.shuffle(seed=self.seed)
        query = query.offset(self.offset).limit(self.limit)
        wanted = json.loads(query.spec.to_json())
        if self.view in db.table_names():
            view = db.open_table(self.view)
            existing = view_info(view.dataset(), self.view)["query"]
            if existing != wanted:
                raise InvalidArgumentError(
                    f"view '{self.view}' exists with a different definition: {json.dumps(existing, sort_keys=True)}; "
                    "drop it to redefine it")
            self.log.info("View '%s' exists with the same definition: left as it is", self.view)
            return {"view": self.view, "created": False, "rows": view.count_rows(), "version": view.version}
        view = db.create_materialized_view(self.view, query, max_rows_per_fragment=self.max_rows_per_fragment)
        self.log.info("Created view '%s' with %d placeholder rows", self.view, view.count_rows())
        return {"view": self.view, "created": True, "rows": view.count_rows(), "version": view.version}


class GenevaPlanRefreshOperator(BaseOperator):
    """Plans a view refresh: appends placeholders for new source rows, stores the plan, returns its summary."""

    template_fields: Sequence[str] = ("view", "src_version")
    ui_color = "#e8f4f8"

    def __init__(self, *, view: str, src_version: int | None = None, max_rows_per_fragment: int | None = None,
                 checkpoint_size: int | None = None, task_size: int | None = None,
                 commit_granularity: int | None = None, parallelism: int | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.view = view
        self.src_version = src_version
        self.max_rows_per_fragment = max_rows_per_fragment
        self.options = {"checkpoint_size": checkpoint_size, "task_size": task_size,
                        "commit_granularity": commit_granularity}
        self.parallelism = parallelism
        self.lance_conn_id = lance_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.views import plan_refresh

        view = LanceHook(self.lance_conn_id).open_table(self.view)
        src_version = int(self.src_version) if self.src_version not in (None, "", "None") else None
        summary = plan_refresh(view, src_version, self.max_rows_per_fragment, BackfillOptions(**self.options),
                               parallelism=self.parallelism)
        self.log.info("Refresh plan %s for view '%s': %d rows to compute", summary["job_id"], self.view,
                      summary["rows_to_compute"])
        return summary
