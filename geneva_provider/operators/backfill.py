"""Operators for the Airflow-side stages of a backfill: add or alter columns, plan, verify.

Each runs one stage in the Airflow worker (no Spark) and returns a small JSON dict.  The
pipeline is imported inside ``execute``, so importing this module stays light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from geneva_provider.core.contracts.options import BackfillOptions, check_count
from geneva_provider.core.docstrings import inherit_params
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.wording import counted, skipped_rows
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
from geneva_provider.operators.links import GenevaJobLink, push_job_link
from geneva_provider.operators.partitions import (
    check_partition_where,
    combined_where,
    render_partition_where,
    run_partition_key,
)

if TYPE_CHECKING:
    from geneva_provider.core.contracts.operations import BackfillColumn

COLUMNS_EXPECTED = '{"y": "my_pkg.udfs:double"} or {"y": ("my_pkg.udfs:double", ["a"])}'


class _SchemaOperator(LineageMixin, BaseOperator):
    """What the schema-changing operators share: the table and the ``lance`` connection naming its database.

    :param table: table name in the Lance database (templated)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    ui_color = "#e8f4f8"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__doc__ = inherit_params(cls.__doc__, _SchemaOperator.__doc__)

    def __init__(self, *, table: str, lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.lance_conn_id = lance_conn_id


class GenevaAddColumnsOperator(_SchemaOperator):
    """Declares UDF columns on a table from importable references; a no-op when already declared.

    :param columns: ``{"y": "my_pkg.udfs:double"}`` or ``{"y": ("my_pkg.udfs:double", ["a"])}`` (templated)
    """

    template_fields: Sequence[str] = ("table", "columns")

    def __init__(self, *, table: str, columns: dict[str, Any], lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(table=table, lance_conn_id=lance_conn_id, **kwargs)
        self.columns = columns

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        job = f"add_columns on table '{self.table}'"
        columns = check_dict(self.columns, "columns", job, COLUMNS_EXPECTED)  # {} is an error, as for Table.add_columns
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        declared = tbl.udf_column_listings()
        specs: dict[str, Any] = {}
        for column, spec in columns.items():
            ref, inputs = _udf_spec(spec, column, job)
            fn = import_udf(ref, column)
            specs[column] = (fn, inputs) if inputs is not None else fn
        version = tbl.add_columns(specs)  # a column already holding its UDF stays; one holding another: ColumnError
        from geneva_provider.core.lineage import declared_lineage

        self.record_lineage(lambda: declared_lineage(tbl.uri, None, tbl.dataset(version).schema, list(specs)), version)
        added, kept = sorted(c for c in specs if c not in declared), sorted(c for c in specs if c in declared)
        if added:
            self.log.info("Declared UDF columns %s on table '%s'", added, self.table)
        return {"table": self.table, "added": added, "existing": kept, "version": version}


def _udf_spec(spec: Any, column: str, job: str) -> tuple[Any, list[str] | None]:
    """A column's ``"pkg.mod:udf"`` or ``("pkg.mod:udf", [inputs])`` as (reference, inputs or None)."""
    if not isinstance(spec, list | tuple):
        return spec, None
    if len(spec) != 2 or isinstance(spec[1], str) or not isinstance(spec[1], list | tuple):
        raise InvalidArgumentError(f"{job}: column '{column}' takes a UDF reference or a pair "
                                   f"(reference, [input columns]), got {spec!r}")
    return spec[0], list(spec[1])


ALTERATIONS_EXPECTED = '[{"path": "y", "udf": "my_pkg.udfs:double_v2"}, {"path": "a", "rename": "b"}]'


class GenevaAlterColumnsOperator(_SchemaOperator):
    """Alters columns with ``Table.alter_columns``: revises a UDF column's code, renames, changes nullability.

    A revised UDF column keeps its values, now stale, until a backfill computes them again: put this task
    before the column's backfill task group, which then computes exactly the rows whose value an older
    version of the UDF computed (or, with ``where``, those it selects).  Running it again changes nothing
    more: the same UDF recorded again leaves the column's values as stale or valid as they are, and a rename
    that landed (a retry after the try before died) is found landed.

    :param alterations: a list of dicts, each with a ``path`` (the column) and any of ``udf`` (a
        ``"package.module:name"`` reference to the new UDF), ``input_columns``, ``rename`` (or ``name``),
        ``nullable`` and ``data_type`` (a pyarrow type name such as ``"int64"``, for a plain column) (templated)
    """

    template_fields: Sequence[str] = ("table", "alterations")

    def __init__(self, *, table: str, alterations: list[dict[str, Any]],
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(table=table, lance_conn_id=lance_conn_id, **kwargs)
        self.alterations = alterations

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        job = f"alter_columns on table '{self.table}'"
        if not isinstance(self.alterations, list | tuple) or not self.alterations or not all(
                isinstance(a, dict) for a in self.alterations):
            raise InvalidArgumentError(f"{job}: alterations must be a non-empty list of dicts such as "
                                       f"{ALTERATIONS_EXPECTED}, got {self.alterations!r}")
        resolved = [_resolved_alteration(a, job) for a in self.alterations]
        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        version = tbl.alter_columns(resolved)
        paths = [a.get("path") for a in resolved]
        renamed = {str(a.get("rename") or a.get("name")): str(a["path"]) for a in resolved
                   if a.get("rename") or a.get("name")}
        altered = [next((new for new, old in renamed.items() if old == p), str(p)) for p in paths]
        from geneva_provider.core.lineage import declared_lineage

        self.record_lineage(lambda: declared_lineage(tbl.uri, None, tbl.dataset(version).schema, altered, renamed),
                            version)
        self.log.info("Altered column(s) %s of table '%s' (version %s)", paths, self.table, version)
        return {"table": self.table, "altered": paths, "version": version}


def _resolved_alteration(alteration: dict[str, Any], job: str) -> dict[str, Any]:
    """An alteration with its UDF reference imported and its type name made a pyarrow type."""
    resolved = dict(alteration)
    column = str(alteration.get("path"))
    for key in ("udf", "virtual_column"):
        if key in resolved:
            resolved[key] = import_udf(resolved[key], column)
    if isinstance(resolved.get("data_type"), str):
        import pyarrow as pa

        try:
            resolved["data_type"] = pa.type_for_alias(resolved["data_type"])
        except ValueError:
            raise InvalidArgumentError(f"{job}: column '{column}': data_type {resolved['data_type']!r} is not a "
                                       "pyarrow type name (e.g. 'int64', 'float32', 'string')") from None
    return resolved


class GenevaPlanBackfillOperator(LineageMixin, BaseOperator):
    """Plans a backfill: stores the plan in the checkpoint store and returns its summary for XCom.

    Takes every backfill option (``where``, ``read_version``, checkpoint and task sizes,
    ``commit_granularity``, ``concurrency``), each templated.  ``parallelism`` is the number of
    Spark task slots the plan sizes tasks for (default: this worker's CPU count; set it to the
    cluster's executor cores).  The summary (``job_id``, ``plan_uri``, ``rows_to_compute``,
    ``tasks``, ``fragments_reused`` ...) is what the Spark and verify operators take as ``plan``.

    The plan is made through the front door (``geneva_provider.operations.plan`` of a ``BackfillColumn``
    request), so every option reaches it exactly as ``Table.backfill`` or a namespace's ``backfill_column`` passes
    it.

    :param table: table name in the Lance database (templated); with ``column``, or give ``request``
    :param column: the UDF column to compute (templated)
    :param request: the whole backfill request instead (templated): a ``BackfillColumn``, its dict -- e.g.
        ``"{{ dag_run.conf['request'] }}"`` in a DAG rendering templates as native objects -- or its JSON (a
        ``backfill_column`` operation, as a Lance namespace's ``AlterTableBackfillColumnsRequest`` carries it:
        ``id``, ``column``, ``where``, checkpoint and task sizes, ...).  Options given to the operator too are
        added to the request's
    :param parallelism: Spark task slots the plan sizes its tasks for (default: this worker's CPU count)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    :param partition_where: the rows of the DAG run's partition, e.g. ``"date = {{ partition_key }}"``:
        rendered from the run's ``partition_key`` (a partitioned timetable, or a trigger with a key) and
        ANDed with ``where``, so a daily partition recomputes only its rows.  ``{{ partition_key }}`` renders
        as a SQL string literal (``'2024-01-02'``, quotes in the key doubled); ``'{{ partition_key }}'`` is the same.
        Jinja that could take the key out of its quotes (a filter but ``lower`` / ``upper``, an index, a call, an
        expression, a statement) is refused when the DAG is parsed.
        Rendered by the operator, not templated by Airflow; a run without a partition key fails the plan
        task (InvalidArgumentError naming the run) before any Spark work.
    """

    template_fields: Sequence[str] = ("table", "column", "request", *BackfillOptions.names())
    ui_color = "#e8f4f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, table: str | None = None, column: str | None = None, request: Any = None,
                 parallelism: int | None = None, partition_where: str | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        job = f"backfill of table {table!r}"
        if request is None and (table is None or column is None):
            raise InvalidArgumentError(f"{type(self).__name__} (task_id {kwargs.get('task_id')!r}): give table and "
                                       f"column, or request (a backfill_column request); got table={table!r}, "
                                       f"column={column!r}")
        options = take_options(BackfillOptions, kwargs, type(self), job)
        check_count(parallelism, "parallelism", job)
        if partition_where is not None:
            check_partition_where(partition_where, f"{job} (task_id {kwargs.get('task_id')!r})")
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.column = column
        self.request = request
        for name, value in options.items():
            setattr(self, name, value)
        self.parallelism = parallelism
        self.partition_where = partition_where
        self.lance_conn_id = lance_conn_id
        self._summary: Any = None  # the plan's summary once planned (its lineage)

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        request = self._request()
        job = f"backfill of table '{request.table}'"
        parsed = parse_options(BackfillOptions, self, job)
        options = {k: v for k, v in dataclasses.asdict(parsed).items() if v is not None and k != "where"}
        where = request.where if parsed.where is None else combined_where(request.where, parsed.where)
        if self.partition_where is not None:  # before the table is opened: a run without a key changes nothing
            key = run_partition_key(context, f"{job} (task_id {self.task_id!r})")
            where = combined_where(where, render_partition_where(self.partition_where, key))
            self.log.info("Partition %r of column '%s': computing the rows where %s", key, request.column, where)
        return plan_job(self, context, request.model_copy(update={"where": where}), options=options,
                        parallelism=self.parallelism)

    def _request(self) -> BackfillColumn:
        """The backfill request: ``request`` (rendered), else one of ``table`` and ``column``; a ``table`` /
        ``column`` given with a request must name the same."""
        from geneva_provider.core.contracts.operations import BackfillColumn, request

        who = f"{type(self).__name__} (task_id {self.task_id!r})"
        if self.request is None:
            return request(BackfillColumn, id=[self.table], column=self.column)
        made = operation_of(self.request, (BackfillColumn,), who)
        for name, value in (("table", self.table), ("column", self.column)):
            if value is not None and value != getattr(made, name):
                raise InvalidArgumentError(f"{who}: {name}={value!r} is not the request's {getattr(made, name)!r}")
        return made


GenevaPlanBackfillOperator.__doc__ = inherit_params(GenevaPlanBackfillOperator.__doc__,
                                                    extra=option_params(BackfillOptions))


class GenevaVerifyOperator(LineageMixin, BaseOperator):
    """Fails loudly if any planned row lacks its value; on success emits the table's Asset event.

    A plan that had nothing to do skips the task instead, so no Asset event wakes downstream DAGs
    for nothing.

    :param plan: the plan summary returned by :class:`GenevaPlanBackfillOperator` (or the refresh plan) (templated)
    :param table: with ``column``, names the default outlet ``lance://<conn id>/<table>/<column>``.
        Both must match the plan's table and column: the Asset is declared when the DAG is parsed,
        the plan arrives at run time, and a mismatch would wake another table's downstream DAGs.
    :param column: the plan's column (see ``table``; None for a view's refresh plan)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options).
    """

    template_fields: Sequence[str] = ("plan",)
    ui_color = "#e8f8ec"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, plan: Any, table: str | None = None, column: str | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        if table is not None and "outlets" not in kwargs:
            from geneva_provider.assets import table_asset

            kwargs["outlets"] = [table_asset(table, column, lance_conn_id)]
        super().__init__(**with_retry_policy(kwargs))
        self.plan = plan
        self.table = table
        self.column = column
        self.lance_conn_id = lance_conn_id
        self._verified: Any = None  # the verify stage's result (what was committed: lineage's statistics)

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.contracts.models import PlanSummary

        plan = PlanSummary.from_xcom(self.plan)
        self._check_matches(plan)
        push_job_link(context, plan.job_id, plan.table, self.lance_conn_id, plan.namespace)
        if plan.nothing_to_do:  # honest signals: a run that changed nothing emits no Asset event
            raise AirflowSkipException(f"{plan.kind} {plan.job_id} of '{plan.table}' had nothing to compute or "
                                       f"commit (up to date at version {plan.read_version}): no Asset event")
        from geneva_provider.pipeline.stages.verify import verify  # the pipeline (and pylance): only with work

        hook = LanceHook(self.lance_conn_id)
        self._verified = result = verify(plan, hook.storage_options)
        self._confirm(plan, hook)
        extra = {"table": result.table, "column": result.column, "version": result.version,
                 "job_id": result.job_id, "rows_computed": plan.rows_to_compute}
        for outlet in self.outlets or []:
            context["outlet_events"][outlet].extra = extra
        skipped = skipped_rows(result.rows_failed)
        self.log.info("Verified %s at version %d: %s in %s%s",
                      f"column '{result.column}' of table '{result.table}'" if result.column
                      else f"view '{result.table}'", result.version, counted(result.rows_verified, "row"),
                      counted(result.fragments_verified, "fragment"), f"; {skipped}" if skipped else "")
        return result.model_dump(mode="json")

    def _confirm(self, plan: Any, hook: LanceHook) -> None:
        """Asks (dry) whether the job left its table up to date for its request: if so, the next run's plan task
        answers from that record without opening the table (``operations/unchanged.py``)."""
        from geneva_provider.core.store.checkpoint import open_store, split_key_uri
        from geneva_provider.operations import confirm

        try:
            root, _ = split_key_uri(plan.plan_uri)
            confirm(hook.catalog_for([*(plan.namespace or []), plan.table]), open_store(root, hook.storage_options),
                    plan.job_id)
        except Exception as exc:  # noqa: BLE001 - a hint for the next plan, never a reason to fail a verified job
            self.log.warning("plan %s: not recorded up to date: %s", plan.job_id, exc)

    def _check_matches(self, plan: Any) -> None:
        """InvalidArgumentError when ``table=`` / ``column=`` (the declared Asset) name another job than the plan."""
        given = {"table": self.table, "column": self.column}
        planned = {"table": plan.table, "column": plan.column}
        if any(value is not None and value != planned[name] for name, value in given.items()):
            raise InvalidArgumentError(
                f"{type(self).__name__} (task_id {self.task_id!r}): table={self.table!r}, column={self.column!r} "
                f"do not match the plan {plan.job_id} of table {plan.table!r}, column {plan.column!r}; "
                "pass the plan of that table and column (or table/column of this plan), so the Asset event "
                "names what was computed")

    def lineage_written(self) -> Any:
        written = self._verified.written if self._verified is not None else None
        return written.committed() if written is not None else None
