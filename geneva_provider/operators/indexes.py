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

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.hooks.errors import fails_without_retry
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators._common import reject_unknown_kwargs, with_retry_policy
from geneva_provider.operators.links import GenevaJobLink, push_job_link
from geneva_provider.operators.spark import _GenevaSparkStageOperator


class _GenevaPlanIndexOperator(BaseOperator):
    """Plans an index job on the Airflow worker and returns its summary for XCom."""

    ui_color = "#f0e8f8"
    operator_extra_links = (GenevaJobLink(),)

    def __init__(self, *, table: str, target_groups: int | None = None,
                 lance_conn_id: str = LanceHook.default_conn_name, **kwargs: Any) -> None:
        reject_unknown_kwargs(type(self), kwargs)  # like the other plan operators: not Airflow's generic TypeError
        super().__init__(**with_retry_policy(kwargs))
        self.table = table
        self.target_groups = target_groups
        self.lance_conn_id = lance_conn_id

    def _request(self, dataset: Any) -> Any:
        raise NotImplementedError

    @fails_without_retry
    def execute(self, context: Any) -> dict[str, Any]:
        from geneva_provider.pipeline.indexes.kind import plan_index

        tbl = LanceHook(self.lance_conn_id).open_table(self.table)
        summary = plan_index(tbl.ref, self._request(tbl.dataset()), store=tbl.checkpoint_store,
                             target_groups=self.target_groups, airflow_run_id=context.get("run_id"))
        self.log.info("Index plan %s for table '%s': %s", summary.job_id, self.table, summary.describe())
        push_job_link(context, summary.job_id, summary.table, self.lance_conn_id)
        return summary.to_xcom()


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
    :param fts: a full-text index's tokenizer settings (``FtsConfig``'s names: ``base_tokenizer``, ``language``,
        ``with_position``, ``lower_case``, ``stem``, ``remove_stop_words``, ``ascii_folding``, ``max_token_length``)
    :param target_groups: segment tasks (fragment groups) the build is cut into (default: up to 8, none under
        1,000 rows)
    :param lance_conn_id: the ``lance`` connection naming the database (and its storage options)
    """

    template_fields: Sequence[str] = ("table", "column", "vector_column_name", "name")

    def __init__(self, *, table: str, column: str | None = None, vector_column_name: str | None = None,
                 index_type: str = "IVF_PQ", metric: str = "l2", num_partitions: int | None = None,
                 num_sub_vectors: int | None = None, num_bits: int = 8, name: str | None = None,
                 replace: bool = True, fts: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(table=table, **kwargs)
        self.column, self.vector_column_name, self.name = column, vector_column_name, name
        self.index_type, self.metric, self.replace, self.fts = index_type, metric, replace, fts
        self.num_partitions, self.num_sub_vectors, self.num_bits = num_partitions, num_sub_vectors, num_bits

    def _request(self, dataset: Any) -> Any:
        from geneva_provider.core.contracts.index_models import FtsConfig
        from geneva_provider.pipeline.indexes.checks import index_spec

        extra = {"fts": FtsConfig(**self.fts)} if self.fts else {}
        return index_spec(dataset, self.table, self.vector_column_name, self.column, self.index_type,
                          metric=self.metric, num_partitions=self.num_partitions,
                          num_sub_vectors=self.num_sub_vectors, num_bits=self.num_bits, name=self.name,
                          replace=self.replace, **extra)


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

    def _request(self, dataset: Any) -> Any:
        from geneva_provider.core.contracts.index_models import IndexRefresh
        from geneva_provider.pipeline.indexes.checks import refresh_name

        return IndexRefresh.of(refresh_name(self.table, self.index_name, self.column), self.retrain)


class GenevaSparkIndexOperator(_GenevaSparkStageOperator):
    """Builds an index plan on Spark: one Spark task per fragment group (segment), one commit; skipped when
    there is nothing to index."""

    stage = Stage.INDEX
