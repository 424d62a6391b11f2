"""The Lance Namespace request models (``lance_namespace``'s, as a client sends them) turned into the front door's
operations (:mod:`geneva_provider.core.contracts.operations`), and the front door's answers into the spec's
response models.  Everything a request carries is checked here or by the front door before anything changes;
what cannot be run (a Docker UDF backend) is refused with InvalidArgumentError naming it.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from geneva_provider.core.contracts.operations import (
    AddColumns,
    AddColumnsEntry,
    AlterColumns,
    BackfillColumn,
    ColumnAlteration,
    CreateIndex,
    CreateView,
    DropColumns,
    DropIndex,
    IndexStats,
    ListIndices,
    RefreshView,
    SourceQuery,
    VirtualColumnEntry,
)
from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    import lance_namespace as ln
    import pyarrow as pa

    from geneva_provider.core.contracts import index_models

#: ``udf_backend`` values that mean "a Python function run by this package"
PYTHON_BACKENDS = frozenset({"", "python", "none", "python_udf", "pythonudf"})
#: the spec's view kinds -> the front door's
VIEW_KINDS: dict[str, Literal["query", "udtf", "chunker"]] = {
    "query": "query", "chunker": "chunker", "scalar_udtf": "chunker", "udtf": "udtf"}


def table_id(request: Any, what: str) -> list[str]:
    """The request's table id; InvalidArgumentError when it has none."""
    if not request.id:
        raise InvalidArgumentError(f"{what}: the request names no table (id is empty)")
    return list(request.id)


def _given(request: Any, *names: str) -> dict[str, Any]:
    return {name: getattr(request, name) for name in names if getattr(request, name, None) is not None}


def backfill(request: ln.AlterTableBackfillColumnsRequest) -> BackfillColumn:
    what = f"backfill_column '{request.column}'"
    _refuse_cluster(request, what)
    return BackfillColumn(id=table_id(request, what), column=request.column, **_given(
        request, "where", "concurrency", "intra_applier_concurrency", "batch_checkpoint_flush_interval_seconds",
        "checkpoint_size", "min_checkpoint_size", "max_checkpoint_size", "task_size", "num_frags",
        "commit_granularity", "read_version"))


def refresh(request: ln.RefreshMaterializedViewRequest) -> RefreshView:
    what = "refresh_materialized_view"
    _refuse_cluster(request, what)
    if request.output_limit is not None:
        raise InvalidArgumentError(f"{what} of {request.id}: output_limit={request.output_limit} is not supported "
                                   "(a refresh computes every new and stale row)")
    options = _given(request, "src_version", "max_rows_per_fragment", "concurrency")
    if request.source_task_size is not None:
        options["task_size"] = request.source_task_size
    return RefreshView(id=table_id(request, what), **options)


def create_view(request: ln.CreateMaterializedViewRequest) -> CreateView:
    what = f"create_materialized_view {request.id}"
    kind = VIEW_KINDS.get(request.kind)
    if kind is None:
        raise InvalidArgumentError(f"{what}: kind {request.kind!r} is not one of {sorted(VIEW_KINDS)}")
    try:
        source = SourceQuery.model_validate_json(request.source_query)
    except ValueError as exc:
        raise InvalidArgumentError(f"{what}: source_query is not the JSON of a source query (source table id, where, "
                                   f"columns, udf_columns, shuffle, seed, limit, offset): {exc}") from None
    udtf = None
    if request.udtf_spec is not None:
        spec = request.udtf_spec
        if spec.batch is not None and spec.batch != (kind == "udtf"):
            raise InvalidArgumentError(f"{what}: udtf_spec.batch={spec.batch} contradicts kind {request.kind!r}")
        udtf = _loaded_udtf(spec.udtf, spec.udtf_name, what)
    return CreateView(id=table_id(request, what), kind=kind, source_query=source, udtf_spec=udtf,
                      with_no_data=request.with_no_data if request.with_no_data is not None else True,
                      auto_refresh=bool(request.auto_refresh))


def add_columns(request: ln.AlterTableAddColumnsRequest) -> AddColumns:
    what = "add_columns"
    entries = []
    for entry in request.new_columns:
        virtual = virtual_column(entry.name, entry.virtual_column, what) if entry.virtual_column else None
        entries.append(AddColumnsEntry(name=entry.name, virtual_column=virtual, computed=entry.computed,
                                       expression=entry.expression))
    return AddColumns(id=table_id(request, what), new_columns=entries)


def virtual_column(name: str, entry: Any, what: str) -> VirtualColumnEntry:
    """An ``AddVirtualColumnEntry`` as the front door takes it: its UDF unpickled (a plain callable made a UDF of
    ``udf_name``, ``udf_version``, ``input_columns`` and the outputs' Arrow types), the backend checked."""
    from geneva_provider.core.functions.udf import UDF, udf

    what = f"{what} column '{name}'"
    backend = (entry.udf_backend or "").strip()
    if backend.lower() not in PYTHON_BACKENDS:
        raise InvalidArgumentError(f"{what}: udf_backend {backend!r} cannot be run here; only Python UDFs (a base64 "
                                   "cloudpickled function, udf_backend unset or 'python') are")
    if entry.image:
        raise InvalidArgumentError(f"{what}: image {entry.image!r}: UDFs run in the Spark executors' Python, not in "
                                   "a container image; send the UDF with an empty image")
    fn = _unpickled(entry.udf, what)
    outputs = [output.column for output in entry.outputs]
    if not isinstance(fn, UDF):
        if not callable(fn):
            raise InvalidArgumentError(f"{what}: udf holds a {type(fn).__name__}, not a function or a geneva UDF")
        if not entry.outputs:
            raise InvalidArgumentError(f"{what}: a plain function needs outputs (each output column's name and "
                                       "Arrow data_type)")
        # the outputs are the columns, by name; several: the fields of the struct the function returns, one column
        # each (a multi-output UDF: computed in one call per row, backfilled together)
        fields = [_field(o.column, o.data_type, o.nullable, what) for o in entry.outputs]
        import pyarrow as pa

        data_type = fields[0].type if len(fields) == 1 else pa.struct(fields)
        fn = udf(fn, data_type=data_type, input_columns=list(entry.input_columns), name=entry.udf_name,
                 version=entry.udf_version, field_metadata=entry.field_metadata or None)
        if len(fields) > 1:
            from geneva_provider.core.functions.udf import UnpackedUDF

            fn = UnpackedUDF(fn)
        input_columns = None
    else:
        input_columns = list(entry.input_columns) or None
        if entry.field_metadata:  # kept on the column's field, beside the UDF's own keys
            fn = dataclasses.replace(fn, field_metadata={**fn.field_metadata, **entry.field_metadata})
    return VirtualColumnEntry(udf=fn, udf_name=entry.udf_name or None, udf_version=entry.udf_version or None,
                              input_columns=input_columns, outputs=outputs if len(outputs) > 1 else None,
                              auto_backfill=bool(entry.auto_backfill), udf_backend=backend or None,
                              field_metadata=entry.field_metadata or None)


def alter_columns(request: ln.AlterTableAlterColumnsRequest) -> AlterColumns:
    what = "alter_columns"
    alterations = []
    for entry in request.alterations:
        data_type: Any = None
        if entry.data_type is not None:
            data_type = arrow_type(entry.data_type, f"{what} column '{entry.path}'")
        udf, inputs = None, None
        if entry.virtual_column is not None and entry.virtual_column.udf:
            udf = _unpickled(entry.virtual_column.udf, f"{what} column '{entry.path}'")
            inputs = list(entry.virtual_column.input_columns or []) or None
        alterations.append(ColumnAlteration(path=entry.path, rename=entry.rename, nullable=entry.nullable,
                                            data_type=data_type, udf=udf, input_columns=inputs))
    return AlterColumns(id=table_id(request, what), alterations=alterations)


def drop_columns(request: ln.AlterTableDropColumnsRequest) -> DropColumns:
    return DropColumns(id=table_id(request, "drop_columns"), columns=list(request.columns))


def create_index(request: ln.CreateTableIndexRequest, *, scalar: bool = False) -> CreateIndex:
    from geneva_provider.core.contracts.index_models import FtsConfig

    what = f"create_table_{'scalar_' if scalar else ''}index on column '{request.column}'"
    given = _given(request, "name", "num_partitions", "num_sub_vectors", "num_bits", "sample_rate", "m",
                   "ef_construction", *FtsConfig.model_fields)  # a full-text index's tokenizer too
    if request.distance_type:
        given["distance_type"] = request.distance_type.lower()
    index_type = (request.index_type or ("BTREE" if scalar else "IVF_PQ")).upper()
    return CreateIndex(id=table_id(request, what), column=request.column, index_type=index_type, **given)


def list_indices(request: ln.ListTableIndicesRequest) -> ListIndices:
    return ListIndices(id=table_id(request, "list_table_indices"))


def index_stats(request: ln.DescribeTableIndexStatsRequest) -> IndexStats:
    what = "describe_table_index_stats"
    if not request.index_name:
        raise InvalidArgumentError(f"{what} of {request.id}: index_name is required")
    return IndexStats(id=table_id(request, what), index_name=request.index_name)


def drop_index(request: ln.DropTableIndexRequest) -> DropIndex:
    what = "drop_table_index"
    if not request.index_name:
        raise InvalidArgumentError(f"{what} of {request.id}: index_name is required")
    return DropIndex(id=table_id(request, what), index_name=request.index_name)


def index_content(stats: index_models.IndexStats, uuid: str) -> Any:
    """One index as ``list_table_indices`` lists it (the spec's ``IndexContent``)."""
    from lance_namespace_urllib3_client.models.index_content import IndexContent

    return IndexContent(index_name=stats.name, index_uuid=uuid, columns=stats.columns, index_type=stats.index_type,
                        status="ready" if stats.num_unindexed_rows == 0 else "partial",
                        num_indexed_rows=stats.num_indexed_rows, num_unindexed_rows=stats.num_unindexed_rows,
                        num_segments=stats.num_segments)


# ---------------------------------------------------------------- pieces
def arrow_type(data_type: dict[str, Any], what: str) -> pa.DataType:
    """The Arrow type of the spec's JSON type (``{"type": "int64"}``, ``{"type": "list", "fields": [...]}``,
    ``{"type": "fixed_size_list", "length": 8, "fields": [...]}``, ``{"type": "struct", "fields": [...]}``)."""
    import pyarrow as pa

    name = str(data_type.get("type", "")).lower() if isinstance(data_type, dict) else ""
    children = [_field(f.get("name", "item"), f.get("type", {}), f.get("nullable", True), what)
                for f in (data_type.get("fields") or [] if isinstance(data_type, dict) else [])]
    if name == "struct":
        return pa.struct(children)
    if name in ("list", "large_list", "fixed_size_list"):
        if len(children) != 1:
            raise InvalidArgumentError(f"{what}: a {name} type needs one field (its items), got {data_type!r}")
        if name == "fixed_size_list":
            return pa.list_(children[0], int(data_type.get("length") or 0))
        return pa.large_list(children[0]) if name == "large_list" else pa.list_(children[0])
    try:
        return pa.type_for_alias(name)
    except ValueError:
        raise InvalidArgumentError(f"{what}: data_type {data_type!r} is not an Arrow type this namespace knows "
                                   "(a primitive such as int64, float32, utf8, or list, fixed_size_list, "
                                   "struct)") from None


def _field(name: str, data_type: Any, nullable: Any, what: str) -> pa.Field:
    import pyarrow as pa

    return pa.field(name, arrow_type(data_type, what), nullable=nullable is not False)


def _unpickled(text: str, what: str) -> Any:
    import cloudpickle

    try:
        return cloudpickle.loads(base64.b64decode(text, validate=True))
    except Exception as exc:  # noqa: BLE001 - binascii.Error, UnpicklingError, ModuleNotFoundError, EOFError...
        raise InvalidArgumentError(f"{what}: udf is not a base64 cloudpickled function ({type(exc).__name__}: "
                                   f"{exc})") from None


def _loaded_udtf(text: str, name: str, what: str) -> Any:
    from geneva_provider.core.functions.udtf import UDTF

    fn = _unpickled(text, f"{what} udtf '{name}'")
    if not isinstance(fn, UDTF):
        raise InvalidArgumentError(f"{what}: udtf_spec.udtf '{name}' holds a {type(fn).__name__}, not a geneva "
                                   "chunker / UDTF (@chunker, @udtf)")
    return fn


def _refuse_cluster(request: Any, what: str) -> None:
    for name in ("cluster", "manifest"):
        if getattr(request, name, None):
            raise InvalidArgumentError(f"{what}: {name} {getattr(request, name)!r}: this namespace runs jobs on its "
                                       "job_runner; named clusters and manifests are not supported")
