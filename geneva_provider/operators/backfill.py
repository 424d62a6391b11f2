"""Operators for the Airflow-side stages of a backfill: add columns, plan, verify.

Each runs one core stage in the Airflow worker (no Spark) and returns a small JSON dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from geneva_provider.errors import ColumnError
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.plan import BackfillOptions, plan_backfill
from geneva_provider.udf import UDF


def import_udf(reference: str) -> UDF:
    """Imports a UDF from ``"package.module:name"`` (or ``"package.module.name"``)."""
    import importlib

    module_name, sep, attr = reference.partition(":")
    if not sep:
        module_name, _, attr = reference.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImportError(f"cannot import UDF {reference!r}: {exc}") from exc
    if not isinstance(obj, UDF):
        raise TypeError(f"{reference!r} is a {type(obj).__name__}, not a @udf function")
    return obj


class GenevaAddColumnsOperator(BaseOperator):
    """Declares UDF columns on a table from importable references; a no-op when already declared.

    :param table: table name in the Lance database.
    :param columns: ``{"y": "my_pkg.udfs:double"}`` or ``{"y": ("my_pkg.udfs:double", ["a"])}``.
    :param lance_conn_id: the ``lance`` connection naming the database.
    """

    template_fields: Sequence[str] = ("table", "columns")
    ui_color = "#e8f4f8"

    def __init__(self, *, table: str, columns: dict[str, Any], lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.columns = columns
        self.lance_conn_id = lance_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        declared = tbl.udf_columns()
        names = set(tbl.schema.names)
        to_add: dict[str, Any] = {}
        kept = []
        for column, spec in self.columns.items():
            ref, inputs = (spec[0], list(spec[1])) if isinstance(spec, (list, tuple)) else (spec, None)
            fn = import_udf(ref)
            if column in declared:
                if declared[column]["version"] != fn.version:
                    raise ColumnError(
                        f"column '{column}' of table '{self.table}' is computed by UDF '{declared[column]['name']}' "
                        f"version {declared[column]['version']}, not {ref} version {fn.version}; "
                        "drop the column to redefine it")
                kept.append(column)
            elif column in names:
                raise ColumnError(f"column '{column}' of table '{self.table}' exists and is not a UDF column")
            else:
                to_add[column] = (fn, inputs) if inputs is not None else fn
        if to_add:
            tbl.add_columns(to_add)
            self.log.info("Declared UDF columns %s on table '%s'", sorted(to_add), self.table)
        return {"table": self.table, "added": sorted(to_add), "existing": sorted(kept), "version": tbl.version}


class GenevaPlanBackfillOperator(BaseOperator):
    """Plans a backfill: stores the plan in the checkpoint store and returns its summary for XCom.

    The summary (``job_id``, ``plan_uri``, ``rows_to_compute``, ``tasks``, ``fragments_reused`` ...)
    is what the Spark and verify operators take as ``plan``.
    """

    template_fields: Sequence[str] = ("table", "column", "where", "read_version")
    ui_color = "#e8f4f8"

    def __init__(
        self,
        *,
        table: str,
        column: str,
        where: str | None = None,
        read_version: int | None = None,
        checkpoint_size: int | None = None,
        min_checkpoint_size: int | None = None,
        max_checkpoint_size: int | None = None,
        task_size: int | None = None,
        commit_granularity: int | None = None,
        concurrency: int | None = None,
        parallelism: int | None = None,
        lance_conn_id: str = LanceHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.column = column
        self.where = where
        self.read_version = read_version
        self.options = {"checkpoint_size": checkpoint_size, "min_checkpoint_size": min_checkpoint_size,
                        "max_checkpoint_size": max_checkpoint_size, "task_size": task_size,
                        "commit_granularity": commit_granularity, "concurrency": concurrency}
        self.parallelism = parallelism
        self.lance_conn_id = lance_conn_id
        self._table_uri: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        self._table_uri = tbl.uri
        read_version = int(self.read_version) if self.read_version not in (None, "", "None") else None
        options = BackfillOptions(where=self.where or None, read_version=read_version, **self.options)
        summary = plan_backfill(tbl, self.column, options, parallelism=self.parallelism)
        self.log.info("Plan %s: %d rows to compute in %d tasks, %d fragments reused", summary["job_id"],
                      summary["rows_to_compute"], summary["tasks"], summary["fragments_reused"])
        return summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return _lineage(self._table_uri, self.table, self.column)


def _lineage(table_uri: str | None, table: str, column: str | None) -> Any:
    """Input table and output column as OpenLineage datasets (the OpenLineage provider is optional)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    namespace, name = _dataset_name(table_uri or table)
    return OperatorLineage(inputs=[Dataset(namespace=namespace, name=name)],
                           outputs=[Dataset(namespace=namespace, name=f"{name}#{column}" if column else name)])


def _dataset_name(uri: str) -> tuple[str, str]:
    if "://" in uri:
        scheme, _, rest = uri.partition("://")
        bucket, _, path = rest.partition("/")
        return f"{scheme}://{bucket}", path
    return "file", uri


class GenevaVerifyOperator(BaseOperator):
    """Fails loudly if any planned row lacks its value; on success emits the table's Asset event.

    :param plan: the plan summary returned by :class:`GenevaPlanBackfillOperator`.
    :param table: with ``column``, names the default outlet ``lance://<conn id>/<table>/<column>``.
    """

    template_fields: Sequence[str] = ("plan",)
    ui_color = "#e8f8ec"

    def __init__(self, *, plan: Any, table: str | None = None, column: str | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        if table is not None and "outlets" not in kwargs:
            from geneva_provider.assets import table_asset

            kwargs["outlets"] = [table_asset(table, column, lance_conn_id)]
        super().__init__(**kwargs)
        self.plan = plan
        self.table = table
        self.lance_conn_id = lance_conn_id
        self._table_uri: str | None = None
        self._column: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.backfill import verify_backfill

        plan = plan_summary_of(self.plan)
        hook = LanceHook(self.lance_conn_id)
        summary = verify_backfill(plan["plan_uri"], hook.storage_options)
        self._table_uri = hook.get_conn().table_uri(summary["table"])
        self._column = summary["column"]
        extra = {"table": summary["table"], "column": summary["column"], "version": summary["version"],
                 "job_id": summary["job_id"], "rows_computed": plan.get("rows_to_compute", 0)}
        for outlet in self.outlets or []:
            context["outlet_events"][outlet].extra = extra
        self.log.info("Verified column '%s' of table '%s' at version %d: %d rows in %d fragments",
                      summary["column"], summary["table"], summary["version"], summary["rows_verified"],
                      summary["fragments_verified"])
        return summary

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return _lineage(self._table_uri, self.table or "", self._column)


def plan_summary_of(plan: Any) -> dict[str, Any]:
    """Accepts the plan summary as a dict or as its JSON text (a rendered template)."""
    import json

    if isinstance(plan, str):
        plan = json.loads(plan)
    if not isinstance(plan, dict) or "plan_uri" not in plan:
        raise ValueError(f"expected the plan summary returned by the plan task, got {plan!r:.200}")
    return plan
