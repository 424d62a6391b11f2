"""Index operators: plan an index build (or an add-only refresh) on the Airflow worker, then build it on Spark.

``GenevaCreateIndexOperator >> GenevaSparkIndexOperator``: the plan task checks the spec against the table --
a bad column, type or parameter fails it with the package's error, before any Spark job -- pins a version,
trains IVF / PQ once and returns the plan summary (XCom); the Spark task runs the segment tasks and the one
commit (skipped when there is nothing to index).  The names are LanceDB's (``vector_column_name`` /
``column``, ``index_type``, ``metric``, ``num_partitions``, ``num_sub_vectors``, ``num_bits``, ``name``,
``replace``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.errors import fails_without_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.openlineage import LineageMixin
from geneva_provider.operators._common import operation_of, plan_job, planned, reject_unknown_kwargs, with_retry_policy
from geneva_provider.operators.links import GenevaJobLink
from geneva_provider.operators.spark import _GenevaSparkStageOperator


class _GenevaPlanIndexOperator(LineageMixin, BaseOperator):
    """Plans an index job on the Airflow worker, through the front door, and returns its summary for XCom."""

    ui_color = "#f0e8f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, table: str | None, target_groups: int | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        reject_unknown_kwargs(type(self), kwargs)  # like the other plan operators: not Airflow's generic TypeError
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.target_groups = target_groups
        self.lance_conn_id = lance_conn_id

    def _job_options(self) -> dict[str, Any]:
        """How the job is cut (``operations.indexes.JOB_OPTIONS``): the ones given."""
        return {"target_groups": self.target_groups} if self.target_groups is not None else {}


class GenevaCreateIndexOperator(_GenevaPlanIndexOperator):
    """Plans the build of an index of a table (vector, scalar or full-text); returns the plan summary for XCom.

    :param table: the table (templated)
    :param column: the column to index (templated).  Neither it nor ``vector_column_name`` given: the table's
        one vector column
    :param vector_column_name: LanceDB's name of ``column`` (templated); both given, they must agree
    :param index_type: ``IVF_PQ`` (default), ``IVF_FLAT``, ``IVF_SQ``, ``IVF_HNSW_SQ``, ``IVF_HNSW_PQ``,
        ``BTREE``, ``BITMAP``, ``LABEL_LIST`` or ``INVERTED`` / ``FTS``
    :param metric: ``l2`` (default), ``cosine`` or ``dot`` (vector indexes)
    :param num_partitions: IVF partitions (default: the square root of the rows)
    :param num_sub_vectors: PQ sub-vectors (default: the dimension / 16, or whatever divides it)
    :param num_bits: bits per PQ code, 4 or 8
    :param name: the index's name (default ``<column>_idx``) (templated)
    :param replace: replace an index of the same name (default True, as LanceDB)
    :param exist_ok: when an index of that name exists on that column, keep it: the task is skipped and nothing
        is planned (so is the Spark task after it) -- create on a DAG's first run, and let the backfill's index
        stage keep it fresh on the next ones (default False; an index of that name on another column is refused)
    :param fts: a full-text index's tokenizer settings (``FtsConfig``'s names: ``base_tokenizer``, ``language``,
        ``with_position``, ``lower_case``, ``stem``, ``remove_stop_words``, ``ascii_folding``, ``max_token_length``)
    :param target_groups: segment tasks (fragment groups) the build is cut into (default: up to 8, none under
        1,000 rows)
    :param request: the whole index request instead of ``table`` and the index's arguments (templated): a
        ``CreateIndex``, its dict (e.g. ``"{{ dag_run.conf['request'] }}"`` in a DAG rendering templates as native
        objects) or its JSON (a ``create_index`` operation, as a Lance namespace's ``CreateTableIndexRequest``
        carries it)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options)

    The plan is made through the front door (``geneva_provider.operations.plan`` of a ``CreateIndex`` request),
    as ``Table.create_index`` plans it.
    """

    template_fields: Sequence[str] = ("table", "column", "vector_column_name", "name", "request")

    def __init__(self, *, table: str | None = None, column: str | None = None, vector_column_name: str | None = None,
                 index_type: str = "IVF_PQ", metric: str = "l2", num_partitions: int | None = None,
                 num_sub_vectors: int | None = None, num_bits: int = 8, name: str | None = None,
                 replace: bool = True, exist_ok: bool = False, fts: dict[str, Any] | None = None,
                 request: Any = None, **kwargs: Any) -> None:
        if (table is None) == (request is None):
            raise InvalidArgumentError(f"{type(self).__name__} (task_id {kwargs.get('task_id')!r}): give table (and "
                                       f"the index's arguments) or request (a create_index request), one of them; "
                                       f"got table={table!r}, request={request!r}")
        super().__init__(table=table, **kwargs)
        self.request = request
        if not isinstance(exist_ok, bool):
            raise InvalidArgumentError(f"{type(self).__name__} '{self.task_id}' of table '{table}': "
                                       f"exist_ok must be True or False, got {exist_ok!r}")
        self.exist_ok = exist_ok
        self.column, self.vector_column_name, self.name = column, vector_column_name, name
        self.index_type, self.metric, self.replace, self.fts = index_type, metric, replace, fts
        self.num_partitions, self.num_sub_vectors, self.num_bits = num_partitions, num_sub_vectors, num_bits

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        made = self._request()
        if self.exist_ok:
            self._skip_if_kept(made)
        return plan_job(self, context, made, options=self._job_options())

    def _request(self) -> Any:
        """The ``CreateIndex`` request: ``request`` (rendered), else one of the operator's arguments."""
        from geneva_provider.core.contracts.operations import CreateIndex, request
        from geneva_provider.pipeline.indexes.checks import index_column

        if self.request is not None:
            return operation_of(self.request, (CreateIndex,), f"{type(self).__name__} (task_id {self.task_id!r})")
        return request(CreateIndex, id=[self.table],
                       column=index_column(str(self.table), self.vector_column_name, self.column),
                       index_type=self.index_type, distance_type=self.metric, num_partitions=self.num_partitions,
                       num_sub_vectors=self.num_sub_vectors, num_bits=self.num_bits, name=self.name,
                       replace=self.replace and not self.exist_ok, **(self.fts or {}))

    def _skip_if_kept(self, made: Any) -> None:
        """``exist_ok``: AirflowSkipException when an index of the request's name exists on its column."""
        from geneva_provider.pipeline.indexes.checks import index_spec
        from geneva_provider.pipeline.indexes.stats import index_segments

        dataset = LanceHook(self.lance_conn_id).catalog_for(made.id).ref(made.table).dataset()
        spec = index_spec(dataset, made.table, None, made.column, made.index_type, name=made.name)
        existing = sorted({c for s in index_segments(dataset, spec.index_name) for c in s["fields"]})
        if existing == [spec.column]:
            raise AirflowSkipException(f"index '{spec.index_name}' of table '{made.table}' exists on column "
                                       f"'{spec.column}' (exist_ok=True): kept as it is, nothing planned")


class GenevaRefreshIndexOperator(_GenevaPlanIndexOperator):
    """Plans an add-only refresh of an index -- the fragments it does not cover, with its saved artifacts -- or,
    with ``retrain``, its build again from a new training; returns the plan summary (nothing to do when the index
    covers every fragment: the Spark task is then skipped).

    :param table: the table (templated)
    :param index_name: the index to refresh (templated); or ``column``: the index ``<column>_idx``
    :param column: the indexed column, when the index has LanceDB's default name (templated)
    :param retrain: train IVF / PQ anew and build every segment again (default False)
    :param target_groups: segment tasks (fragment groups) the refresh is cut into
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options)
    """

    template_fields: Sequence[str] = ("table", "index_name", "column")

    def __init__(self, *, table: str, index_name: str | None = None, column: str | None = None,
                 retrain: bool = False, **kwargs: Any) -> None:
        super().__init__(table=table, **kwargs)
        self.index_name, self.column, self.retrain = index_name, column, retrain

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.core.contracts.index_models import IndexRefresh
        from geneva_provider.operations.indexes import index_job
        from geneva_provider.pipeline.indexes.checks import refresh_name

        table = str(self.table)
        request = IndexRefresh.of(refresh_name(table, self.index_name, self.column), self.retrain)
        job = index_job(LanceHook(self.lance_conn_id).database.catalog.ref(table), lambda _: request,
                        options=self._job_options())
        return planned(self, context, job.plan(None, context.get("run_id")))


class GenevaPlanIndexRefreshesOperator(LineageMixin, BaseOperator):
    """Plans the index stage of a job: an add-only refresh of each index the job's commit may have left behind --
    those on ``column`` (on any column of its multi-output group), or, for a view's refresh (``column`` None),
    those on the columns it writes (not on a UDF column added to the view: its backfill's stage refreshes them)
    -- and returns the list of plan summaries, one per index with fragments to index (XCom: a
    ``GenevaSparkIndexOperator`` mapped over it; an empty list skips it).

    An index not built by this package (no saved artifacts) is left as it is, with a warning; one whose new rows
    drifted from its training is retrained (``pipeline/indexes/upkeep.py``).

    :param table: the table (templated)
    :param column: the column the job wrote (templated); None: a view's refresh
    :param all_indexes: every index of the table, whatever ``column`` -- after a compaction, which rewrites
        every column of the fragments it coalesces
    :param namespace: the child namespace the table is in, e.g. ``["team_a"]`` -- a request's ``id`` but its last
        level, ``"{{ dag_run.conf['request']['id'][:-1] }}"`` (templated); default the database's own tables
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options)
    """

    template_fields: Sequence[str] = ("table", "column", "namespace")
    ui_color = "#f0e8f8"

    def __init__(self, *, table: str, column: str | None = None, all_indexes: bool = False,
                 namespace: Sequence[str] | None = None, lance_conn_id: str = LanceHook.default_conn_name,
                 **kwargs: Any) -> None:
        reject_unknown_kwargs(type(self), kwargs)
        super().__init__(**with_retry_policy(kwargs))
        self.table, self.column, self.all_indexes, self.lance_conn_id = table, column, all_indexes, lance_conn_id
        self.namespace = namespace

    @fails_without_retry
    def execute(self, context: Any) -> list[dict[str, Any]]:
        from geneva_provider.core.contracts.lineage_models import JobLineage
        from geneva_provider.operations.unchanged import record, recorded

        namespace = self.namespace or []
        if isinstance(namespace, str) or not all(isinstance(part, str) and part for part in namespace):
            raise InvalidArgumentError(f"{type(self).__name__} (task_id {self.task_id!r}): namespace must be a list "
                                       f"of names, e.g. ['team_a'], got {self.namespace!r}")
        ref = LanceHook(self.lance_conn_id).catalog_for([*namespace, self.table]).ref(self.table)
        on = f"column '{self.column}'" if self.column is not None and not self.all_indexes else "any column"
        store, digest = ref.checkpoint_store(), self._digest()
        state, known = recorded(ref, store, digest)
        if known is not None:  # nothing to index at this very state: the table is not opened (no pylance import)
            self.record_lineage(JobLineage.of_table(ref.uri, known.state.version))
            self.log.info("Indexes of table '%s' on %s: nothing to refresh (table unchanged since version %d, when "
                          "there was nothing to index)", self.table, on, known.state.version)
            return []
        from geneva_provider.pipeline.indexes.upkeep import indexes_on, job_indexes, plan_refreshes

        ds = ref.dataset()
        names = indexes_on(ds) if self.all_indexes else job_indexes(ds, self.column)
        plans = plan_refreshes(ref, names, store, airflow_run_id=context.get("run_id"))
        if not plans and state is not None:
            record(ref, store, digest, state, ds.version, None)
        self.record_lineage(JobLineage.of_table(ref.uri, ds.version))
        self.log.info("Indexes of table '%s' on %s: %s; to refresh: %s", self.table, on, names or "none",
                      [f"{p.job_id}: {p.describe()}" for p in plans] or "none (nothing to index)")
        return [p.to_xcom() for p in plans]

    def _digest(self) -> str:
        """What names this task's question -- which indexes of the table the job may have left behind -- for its
        record of a state at which there was nothing to index."""
        from geneva_provider.core.store.layout import md5_hex

        return md5_hex(f"index refreshes of table '{self.table}': "
                       f"{'every index' if self.all_indexes else f'column {self.column!r}'}")


class GenevaSparkIndexOperator(_GenevaSparkStageOperator):
    """Builds an index plan on Spark: one Spark task per fragment group (segment), one commit; skipped when
    there is nothing to index.

    :param table: the plan's table: the task's outlet is then :func:`~geneva_provider.assets.index_alias` of it,
        to which each build that committed adds an event of its index's
        :func:`~geneva_provider.assets.index_asset` (extra: table, index, version, rows indexed).  An ``Asset``
        given in ``outlets`` gets that extra instead
    """

    stage = Stage.INDEX

    def __init__(self, *, table: str | None = None, **kwargs: Any) -> None:
        if table is not None and "outlets" not in kwargs:
            from geneva_provider.assets import index_alias

            kwargs["outlets"] = [index_alias(table, kwargs.get("lance_conn_id", LanceHook.default_conn_name))]
        super().__init__(**kwargs)
        self.table = table

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        self._announce(context, result)
        return result

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        result = super().execute_complete(context, event)
        self._announce(context, result)
        return result

    def _announce(self, context: Any, result: dict[str, Any]) -> None:
        """The outlets' events of a build that committed (it indexed fragments): an alias gets its index's
        Asset, an Asset its extra."""
        from airflow.sdk import Asset, AssetAlias

        from geneva_provider.assets import index_asset
        from geneva_provider.core.contracts.models import PlanSummary

        if not result.get("fragments_indexed"):
            return
        plan = PlanSummary.from_xcom(self.plan)
        extra = {"table": plan.table, "index": result["index_name"], "version": result["version"],
                 "rows_indexed": result["rows_indexed"], "refresh": result["refresh"], "job_id": result["job_id"]}
        for outlet in self.outlets or []:
            if isinstance(outlet, AssetAlias):
                context["outlet_events"][outlet].add(index_asset(plan.table, result["index_name"],
                                                                 self.lance_conn_id), extra=extra)
            elif isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = extra
