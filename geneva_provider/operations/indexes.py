"""The index operations of the front door: an index build or refresh as a job (checked against the table before it
starts), and the listing, statistics and drop of a table's indexes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from geneva_provider.core.catalog import Catalog
from geneva_provider.core.contracts.index_models import FtsConfig, IndexRefresh, IndexSpec
from geneva_provider.core.contracts.kinds import JobKind
from geneva_provider.core.contracts.operations import (
    CreateIndex,
    DropIndex,
    IndexList,
    IndexStats,
    IndexStatsInfo,
    ListIndices,
)
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.operations.background import PreparedJob

if TYPE_CHECKING:
    from geneva_provider.core.refs import TableRef
    from geneva_provider.core.store.checkpoint import CheckpointStore

JOB_OPTIONS = ("target_groups", "max_segments")  # how the job is cut, besides the index's own parameters


def index_job(ref: TableRef, request: Callable[[Any], IndexSpec | IndexRefresh], *, spark: Any = None,
              checkpoint_store: CheckpointStore | None = None,
              options: dict[str, Any] | None = None) -> PreparedJob:
    """The job of the index request made of the table's dataset: checked now (table, request, options), run by
    the returned job."""
    from geneva_provider.pipeline.indexes.build import check_create
    from geneva_provider.pipeline.indexes.kind import plan_index
    from geneva_provider.pipeline.jobs import build_index

    options = dict(options or {})
    unknown = sorted(set(options) - set(JOB_OPTIONS))
    if unknown:
        raise InvalidArgumentError(f"index build on table '{ref.name}': unknown option(s) {unknown}; the "
                                   f"options are {list(JOB_OPTIONS)}")
    ds = ref.dataset()  # TableNotFoundError if the table was dropped
    made = request(ds)  # a bad argument refused
    if isinstance(made, IndexSpec):  # checked against the table here, so a submitted build refuses it too
        check_create(ds, made, ref.name)
    store = checkpoint_store or ref.checkpoint_store()
    given = {k: v for k, v in options.items() if v is not None}
    return PreparedJob(lambda control: build_index(ref, made, spark=spark, store=store, control=control, **options),
                       lambda parallelism, run_id: plan_index(ref, made, store=store, parallelism=parallelism,
                                                              airflow_run_id=run_id, **given),
                       store, f"index {ref.name}", JobKind.INDEX, ref.name)


def create_index(request: CreateIndex, catalog: Catalog, *, spark: Any = None,
                 checkpoint_store: CheckpointStore | None = None, options: dict[str, Any] | None = None) -> PreparedJob:
    """``CreateTableIndexRequest``: a vector, scalar or full-text index over every fragment, as a job."""
    from geneva_provider.core.contracts.index_models import IndexType, parse_index_type
    from geneva_provider.pipeline.indexes.checks import index_spec

    name = request.table
    fts = request.fts_settings()
    params = request.model_dump(exclude={"op", "id", "column", "index_type", "distance_type", *fts},
                                exclude_none=True)
    subject = f"create_index on table '{name}'" + (f" column '{request.column}'" if request.column else "")
    if fts or parse_index_type(request.index_type, subject) is IndexType.INVERTED:
        try:
            params["fts"] = FtsConfig(**fts)
        except ValueError as exc:
            first = exc.errors()[0]  # type: ignore[attr-defined]
            raise InvalidArgumentError(f"{subject}: {first['loc'][0]}: {first['msg']} (got "
                                       f"{first.get('input')!r})") from None

    def spec(ds: Any) -> IndexSpec:
        return index_spec(ds, name, None, request.column, request.index_type, metric=request.distance_type,
                          **params)
    return index_job(catalog.ref(name), spec, spark=spark, checkpoint_store=checkpoint_store, options=options)


def list_indices(request: ListIndices, catalog: Catalog) -> IndexList:
    return indexes_of(catalog.ref(request.table))


def indexes_of(ref: TableRef) -> IndexList:
    from geneva_provider.pipeline.indexes.stats import list_indices as listed

    return IndexList(indexes=listed(ref.dataset()))


def index_stats(request: IndexStats, catalog: Catalog) -> IndexStatsInfo:
    """One index's statistics; InvalidArgumentError naming the table and the index for an unknown name."""
    from geneva_provider.pipeline.indexes.stats import index_stats as stats

    try:
        return IndexStatsInfo(stats=stats(catalog.ref(request.table).dataset(), request.index_name))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"index_stats on table '{request.table}': {exc}") from None


def drop_index(request: DropIndex, catalog: Catalog) -> IndexList:
    """Drops the index (Lance's ``drop_index``); InvalidArgumentError naming it when the table has no such index.
    Returns the indexes left."""
    ref = catalog.ref(request.table)
    names = [i.name for i in indexes_of(ref).indexes]
    if request.index_name not in names:
        raise InvalidArgumentError(f"drop_index on table '{request.table}': no index {request.index_name!r} (its "
                                   f"indexes: {names})")
    ref.dataset().drop_index(request.index_name)
    return indexes_of(ref)
