"""A table's indexes in the notebook: ``create_index`` / ``create_scalar_index`` / ``create_fts_index`` /
``refresh_index`` as index jobs, ``list_indices`` / ``index_stats`` (facade).

The names and defaults are LanceDB's (``vector_column_name`` or ``column``, ``metric="l2"``,
``index_type="IVF_PQ"``, ``replace=True``, ``name`` default ``<column>_idx``).  Each call is one index job
(:func:`~geneva_provider.pipeline.jobs.build_index`): checked and planned here -- a bad column, type or parameter
is refused with the package's error before any Spark session starts, the table unchanged --, segments on Spark
tasks, one commit; ``list_jobs()`` shows it, and a cancel stops it with nothing committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from geneva_provider.core.contracts.index_models import IndexBuildResult, IndexRefresh, IndexSpec, IndexStats
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore
    from geneva_provider.facade.job_handle import JobHandle
    from geneva_provider.pipeline.jobs import JobControl

_FTS_NAMES = ("base_tokenizer", "language", "lower_case", "stem", "remove_stop_words", "ascii_folding",
              "max_token_length")
_JOB_OPTIONS = ("target_groups", "max_segments")  # how the job is cut, besides the index's own parameters


class IndexMethods:
    """The index methods of :class:`~geneva_provider.facade.table.Table` (which provides what is declared here)."""

    ref: TableRef
    name: str
    checkpoint_store: CheckpointStore

    def dataset(self, version: int | None = None) -> Any:
        raise NotImplementedError

    def _writable(self, what: str) -> None:
        raise NotImplementedError

    def create_index(self, vector_column_name: str | None = None, *, column: str | None = None, metric: str = "l2",
                     index_type: str = "IVF_PQ", num_partitions: int | None = None,
                     num_sub_vectors: int | None = None, num_bits: int = 8, replace: bool = True,
                     name: str | None = None, sample_rate: int = 256, m: int | None = None,
                     ef_construction: int | None = None, max_iterations: int | None = None,
                     target_partition_size: int | None = None, accelerator: str | None = None, spark: Any = None,
                     progress: bool | None = None, **options: Any) -> IndexBuildResult:
        """Builds a vector index (``IVF_PQ``, ``IVF_FLAT``, ``IVF_SQ``, ``IVF_HNSW_SQ``, ``IVF_HNSW_PQ``; scalar and
        full-text types too) over every fragment: IVF / PQ trained once on a sample, one segment per fragment
        group built by a Spark task, one commit.

        ``vector_column_name`` (or ``column``): the column, by default the table's one vector column.
        ``num_partitions`` defaults to the square root of the rows, ``num_sub_vectors`` to the dimension / 16 (or
        whatever divides it), or ``target_partition_size`` rows per partition.  LanceDB's ``sample_rate`` (training
        rows per partition or code), ``max_iterations`` (IVF k-means, 50 by default) and, for the HNSW types, ``m``
        and ``ef_construction`` are passed on.  ``accelerator`` (LanceDB's GPU build) must be None:
        with one, Lance builds the whole index on one node, dropping the fragment groups (lance.md §13).
        ``options``: ``target_groups`` (segment tasks; default the session's parallelism,
        no group under 1,000 rows) and ``max_segments``.  A build killed and run again resumes.
        ``progress=False`` shows no progress; by default it shows the rows of the segments built so far where the
        job runs (a notebook widget, a terminal bar, or log lines), as ``backfill`` does.
        """
        if accelerator is not None:
            raise InvalidArgumentError(f"create_index on table '{self.name}': accelerator={accelerator!r}: segments "
                                       "are built on CPU by Spark tasks (with an accelerator Lance builds the whole "
                                       "index on one node); pass accelerator=None")
        from geneva_provider.pipeline.indexes.checks import index_column

        return self._built(dict(column=index_column(self.name, vector_column_name, column), index_type=index_type,
                                distance_type=metric, num_partitions=num_partitions,
                                num_sub_vectors=num_sub_vectors, num_bits=num_bits, replace=replace, name=name,
                                sample_rate=sample_rate, m=m, ef_construction=ef_construction,
                                max_iterations=max_iterations, target_partition_size=target_partition_size),
                           spark, progress, options)

    def _built(self, fields: dict[str, Any], spark: Any, progress: bool | None,
               options: dict[str, Any]) -> IndexBuildResult:
        """An index build through the front door (``CreateIndex``), shown as the job runs."""
        from geneva_provider.core.contracts.operations import CreateIndex, request
        from geneva_provider.operations import prepare

        self._writable("an index build")
        job = prepare(request(CreateIndex, id=[self.name], **fields), self._conn.catalog, spark=spark,
                      checkpoint_store=self.checkpoint_store, options=options)
        return self._shown(job.run, progress)

    def create_index_async(self, vector_column_name: str | None = None, **params: Any) -> JobHandle:
        """Starts :meth:`create_index` in a background thread (checked before this returns); the handle has
        ``status()``, ``result()``, ``cancel()``."""
        from geneva_provider.facade.job_handle import JobHandle

        spark, options = params.pop("spark", None), {k: params.pop(k) for k in _JOB_OPTIONS if k in params}

        def spec(ds: Any) -> IndexSpec:
            from geneva_provider.pipeline.indexes.checks import index_spec

            return index_spec(ds, self.name, vector_column_name, params.pop("column", None),
                              params.pop("index_type", "IVF_PQ"), **params)
        run = self._index_job(spec, spark, options)
        return JobHandle(self.checkpoint_store, f"index {self.name}", kind=JobKind.INDEX,
                         table=self.name).start(run)  # type: ignore[arg-type]  # its result is an IndexBuildResult

    def create_scalar_index(self, column: str, index_type: str = "BTREE", *, replace: bool = True,
                            name: str | None = None, spark: Any = None, progress: bool | None = None,
                            **options: Any) -> IndexBuildResult:
        """Builds a scalar index -- ``BTREE`` (default), ``BITMAP`` or ``LABEL_LIST`` -- on ``column`` as an index
        job: one segment per fragment group on Spark tasks, merged into one at the commit."""
        from geneva_provider.core.contracts.index_models import IndexSpec, IndexType

        kind = IndexSpec.of(column, index_type, table=self.name).index_type
        if kind.is_vector or kind is IndexType.INVERTED:
            raise InvalidArgumentError(f"create_scalar_index on table '{self.name}': index_type must be BTREE, "
                                       f"BITMAP or LABEL_LIST, got {index_type!r} (vector indexes: create_index; "
                                       "full-text: create_fts_index)")
        return self._built(dict(column=column, index_type=kind.value, replace=replace, name=name), spark, progress,
                           options)

    def create_fts_index(self, column: str | None = None, *, field_names: str | list[str] | None = None,
                         replace: bool = True, name: str | None = None, with_position: bool = False,
                         use_tantivy: bool = False, spark: Any = None, progress: bool | None = None,
                         **settings: Any) -> IndexBuildResult:
        """Builds a full-text (``INVERTED``) index on a string column as an index job, every segment with the one
        tokenizer configuration: ``base_tokenizer``, ``language``, ``lower_case``, ``stem``,
        ``remove_stop_words``, ``ascii_folding``, ``max_token_length`` (Lance's names and defaults).

        ``field_names`` is LanceDB's name of ``column`` (one column); ``use_tantivy=False`` is accepted as LanceDB
        takes it (the index is Lance's own; tantivy is not built)."""
        column = _fts_column(self.name, column, field_names)
        if use_tantivy is not False:
            raise InvalidArgumentError(f"create_fts_index on table '{self.name}' column {column!r}: "
                                       f"use_tantivy={use_tantivy!r}: the index is Lance's native full-text index "
                                       "(use_tantivy=False, LanceDB's default); a tantivy index is not built")
        options = {k: settings.pop(k) for k in _JOB_OPTIONS if k in settings}
        unknown = sorted(set(settings) - set(_FTS_NAMES))
        if unknown:
            raise InvalidArgumentError(f"create_fts_index on table '{self.name}' column {column!r}: unknown "
                                       f"setting(s) {unknown}; the settings are {list(_FTS_NAMES)} and "
                                       f"{list(_JOB_OPTIONS)}")
        return self._built(dict(column=column, index_type="INVERTED", replace=replace, name=name,
                                with_position=with_position, **settings), spark, progress, options)

    def refresh_index(self, name: str | None = None, *, column: str | None = None, retrain: bool = False,
                      spark: Any = None, progress: bool | None = None, **options: Any) -> IndexBuildResult:
        """Indexes, add-only with the index's saved artifacts (no retraining), the fragments it does not cover --
        appended, rewritten by a backfill, left by a compaction --; ``retrain=True`` trains anew and builds every
        segment again.  ``name`` or ``column`` (the index ``<column>_idx``).  Nothing to index: no Spark job."""
        from geneva_provider.core.contracts.index_models import IndexRefresh
        from geneva_provider.pipeline.indexes.checks import refresh_name

        request = IndexRefresh.of(refresh_name(self.name, name, column), retrain)
        return self._shown(self._index_job(lambda ds: request, spark, options), progress)

    def list_indices(self) -> list[IndexStats]:
        """Every index of the table, by name: type, columns, rows indexed and unindexed, segments, partitions."""
        from geneva_provider.core.contracts.operations import ListIndices
        from geneva_provider.operations import run

        return run(self._conn, ListIndices(id=[self.name])).indexes

    def index_stats(self, name: str) -> IndexStats:
        """One index's rows indexed and unindexed, fragments, segments and IVF partitions; InvalidArgumentError
        naming the table and the index, and listing the table's indexes, for an unknown name."""
        from geneva_provider.core.contracts.operations import IndexStats, request
        from geneva_provider.operations import run

        return run(self._conn, request(IndexStats, id=[self.name], index_name=name)).stats

    def _shown(self, run: Callable[[JobControl], IndexBuildResult], progress: bool | None) -> IndexBuildResult:
        """The job run in the foreground, its progress shown unless ``progress=False`` (Ctrl-C cancels it)."""
        from geneva_provider.facade.job_handle import with_progress

        return with_progress(self.checkpoint_store, f"index {self.name}", run, progress)  # type: ignore[arg-type]

    def _index_job(self, request: Callable[[Any], IndexSpec | IndexRefresh], spark: Any,
                   options: dict[str, Any]) -> Callable[[JobControl], IndexBuildResult]:
        """The job of the request made of the table's dataset: checked now (table, request, options), run by the
        returned call."""
        from geneva_provider.operations.indexes import index_job

        self._writable("an index build")
        return index_job(self.ref, request, spark=spark, checkpoint_store=self.checkpoint_store, options=options).run


def _fts_column(table: str, column: str | None, field_names: str | list[str] | None) -> str:
    """The one column of a ``create_fts_index`` call: ``column``, or LanceDB's ``field_names`` (a name or a list
    of one); InvalidArgumentError naming the table and the values otherwise."""
    subject = f"create_fts_index on table '{table}'"
    names = [field_names] if isinstance(field_names, str) else list(field_names or [])
    if column is not None and names and names != [column]:
        raise InvalidArgumentError(f"{subject}: column={column!r} and field_names={field_names!r} name the same "
                                   "argument; give one of them")
    if column is None and len(names) != 1:
        raise InvalidArgumentError(f"{subject}: name the one text column to index (column= or field_names=), got "
                                   f"field_names={field_names!r}" if names else f"{subject}: name the text column "
                                   "to index (column= or field_names=)")
    return column if column is not None else names[0]
