"""The front door's typed requests and responses: one model per operation a client may ask of the pipeline.

They mirror the Lance Namespace request models (``lance_namespace_urllib3_client.models``:
``AlterTableBackfillColumnsRequest``, ``CreateMaterializedViewRequest``, ``RefreshMaterializedViewRequest``,
``AlterTableAddColumnsRequest``, ``CreateTableIndexRequest``, ...) field by field, so a namespace or a REST
server maps the spec's request onto one of these without renaming; the job operations (``GetJob``,
``ListJobs``, ``CancelJob``) are the extension the spec lacks.  A table is named by ``id`` (namespace path +
table name, as the spec does).  Requests carry no secrets: storage options come from the database they run
on.  :data:`Operation` is the union of the requests, told apart by ``op``; :func:`parse_operation` reads one
from JSON.  The models check types only; values (sizes, columns, filters) are checked by the handler against
the table, with the package's own errors naming them, before anything changes (``geneva_provider.operations``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from geneva_provider.core.contracts import index_models
from geneva_provider.core.contracts.models import JobRecord
from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:  # the view models are a query's, not a request's: an Airflow plan task reads requests only
    from geneva_provider.core.views.meta import ViewQuery


def _wire_function(value: Any) -> Any:
    """A UDF / UDTF travels as its base64 cloudpickle (the spec's ``udf`` field); in-process it is the object."""
    return value if isinstance(value, str) else value.pickled_b64()


#: a geneva_provider UDF or UDTF object in-process, or its base64 cloudpickle on the wire
PickledFunction = Annotated[Any, PlainSerializer(_wire_function, return_type=str, when_used="json")]


def _flag(value: Any, info: ValidationInfo) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{info.field_name} must be True or False, got {value!r}")
    return value


#: a flag given as True or False, nothing else ("no" is not False)
Flag = Annotated[bool, BeforeValidator(_flag)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


M = TypeVar("M", bound=BaseModel)


class _TableRequest(_Model):
    id: list[str] = Field(min_length=1, description="namespace path + table name (the spec's ``id``)")

    @field_validator("id")
    @classmethod
    def _named(cls, value: list[str]) -> list[str]:
        if not all(isinstance(part, str) and part for part in value):
            raise ValueError(f"every level of a table id is a non-empty name, got {value!r}")
        return value

    @property
    def table(self) -> str:
        """The table's name in the database the request runs on (the id's last level)."""
        return self.id[-1]


# ---------------------------------------------------------------- jobs over a column or a view
class BackfillColumn(_TableRequest):
    """``AlterTableBackfillColumnsRequest`` -> ``Table.backfill(column, where, **options)``."""

    op: Literal["backfill_column"] = "backfill_column"
    column: str = Field(description="the UDF column to compute (``backfill``'s ``column``)")
    where: str | None = Field(default=None, description="SQL filter of the rows to compute (``backfill``'s ``where``)")
    concurrency: int | None = Field(default=None, description="Spark partitions the tasks are dealt over")
    intra_applier_concurrency: int | None = Field(default=None, description="threads calling the UDF in one task")
    batch_checkpoint_flush_interval_seconds: float | None = Field(default=None, description="seconds between flushes")
    checkpoint_size: int | None = Field(default=None, description="rows per batch checkpoint")
    min_checkpoint_size: int | None = Field(default=None, description="lower bound of the measured checkpoint sizes")
    max_checkpoint_size: int | None = Field(default=None, description="upper bound of the measured checkpoint sizes")
    task_size: int | None = Field(default=None, description="rows per Spark task")
    num_frags: int | None = Field(default=None, description="compute only the first N fragments needing it")
    commit_granularity: int | None = Field(default=None, description="fragments per DataReplacement commit")
    read_version: int | None = Field(default=None, description="table version to read and commit against")
    refresh_indexes: Flag = Field(default=True, description="index the rewritten fragments after the commit")

    def options(self) -> dict[str, Any]:
        """The tuning options given, as ``BackfillOptions.parse`` takes them."""
        return self.model_dump(exclude={"op", "id", "column", "where", "refresh_indexes"}, exclude_none=True)


class UdfColumnRef(_Model):
    """A UDF column of a view's query: the UDF and the source columns it reads."""

    udf: PickledFunction
    input_columns: list[str] | None = None


class SourceQuery(_Model):
    """A view's ``source_query``: the serialized form of ``table.search(None)...`` (``core/views``' ViewQuery)."""

    id: list[str] = Field(min_length=1, description="the source table")
    version: int | None = Field(default=None, description="source version the view is pinned to (a checked-out query)")
    where: str | None = None
    columns: dict[str, str] = Field(default_factory=dict, description="output name -> source column")
    udf_columns: dict[str, UdfColumnRef] = Field(default_factory=dict)
    shuffle: Flag = False
    seed: int | None = None
    limit: int | None = None
    offset: int | None = None

    @classmethod
    def of(cls, spec: ViewQuery, version: int | None = None, namespace: list[str] | None = None) -> SourceQuery:
        """The request form of a facade query's :class:`ViewQuery` (``Query.spec``)."""
        return cls(id=[*(namespace or []), spec.base_table], version=version, where=spec.where,
                   columns=dict(spec.columns),
                   udf_columns={name: UdfColumnRef(udf=fn, input_columns=list(inputs))
                                for name, (fn, inputs) in spec.udf_columns.items()},
                   shuffle=spec.shuffle, seed=spec.seed, limit=spec.limit, offset=spec.offset)

    def view_query(self, db_uri: str) -> ViewQuery:
        """The :class:`ViewQuery` of this source query over the database at ``db_uri``; UDFs unpickled."""
        from geneva_provider.core.functions.udf import UDF
        from geneva_provider.core.views.meta import ViewQuery

        udfs = {}
        for name, ref in self.udf_columns.items():
            fn = UDF.load(ref.udf) if isinstance(ref.udf, str) else ref.udf
            if not isinstance(fn, UDF):
                raise InvalidArgumentError(f"source_query udf_columns '{name}': needs a geneva_provider UDF, "
                                           f"got {fn!r}")
            inputs = ref.input_columns if ref.input_columns is not None else fn.input_columns
            udfs[name] = (fn, list(inputs or []))
        return ViewQuery(base_table=self.id[-1], base_table_db_uri=db_uri, where=self.where,
                         columns=dict(self.columns), udf_columns=udfs, shuffle=self.shuffle, seed=self.seed,
                         limit=self.limit, offset=self.offset)


class CreateView(_TableRequest):
    """``CreateMaterializedViewRequest`` -> ``Connection.create_materialized_view`` (``kind="query"``) or
    ``create_udtf_view`` (``kind`` ``"udtf"`` / ``"chunker"``, ``udtf_spec`` the UDTF).  ``with_no_data=False``
    also refreshes it (a job: :class:`ViewCreated` carries its id)."""

    op: Literal["create_materialized_view"] = "create_materialized_view"
    kind: Literal["query", "udtf", "chunker"] = "query"
    source_query: SourceQuery
    udtf_spec: PickledFunction | None = Field(default=None, description="the chunker / batch UDTF (kind udtf|chunker)")
    max_rows_per_fragment: int | None = None
    with_no_data: Flag = True
    auto_refresh: Flag = Field(default=False, description="``refresh_on_change``: refreshed after each source change")


class RefreshView(_TableRequest):
    """``RefreshMaterializedViewRequest`` -> ``Table.refresh(src_version, max_rows_per_fragment, **options)``."""

    op: Literal["refresh_materialized_view"] = "refresh_materialized_view"
    src_version: int | None = None
    max_rows_per_fragment: int | None = None
    concurrency: int | None = None
    checkpoint_size: int | None = None
    min_checkpoint_size: int | None = None
    max_checkpoint_size: int | None = None
    task_size: int | None = None
    commit_granularity: int | None = None
    refresh_indexes: Flag = True

    def options(self) -> dict[str, Any]:
        """The tuning options given, as ``RefreshOptions.parse`` takes them."""
        return self.model_dump(exclude={"op", "id", "src_version", "max_rows_per_fragment", "refresh_indexes"},
                               exclude_none=True)


# ---------------------------------------------------------------- columns
class VirtualColumnEntry(_Model):
    """``AddVirtualColumnEntry``: a UDF column (several ``outputs``: a multi-output UDF's columns)."""

    udf: PickledFunction = Field(description="a geneva_provider UDF, or its base64 cloudpickle")
    udf_name: str | None = None
    udf_version: str | None = None
    input_columns: list[str] | None = Field(default=None,
                                            description="the columns its parameters read (default: its own)")
    outputs: list[str] | None = None
    auto_backfill: Flag = False
    udf_backend: str | None = None
    field_metadata: dict[str, str] | None = None


class AddColumnsEntry(_Model):
    """``AddColumnsEntry``: one new column, exactly one of a UDF column, a computed SQL column (kept valid per row
    like a UDF column) or an expression (evaluated once by Lance)."""

    name: str
    virtual_column: VirtualColumnEntry | None = None
    computed: str | None = None
    expression: str | None = None
    computed_type: Annotated[Any, PlainSerializer(lambda t: None if t is None else str(t), return_type=str | None,
                                                  when_used="json")] = Field(
        default=None, description="a computed column's type (a pyarrow type in-process, its name on the wire; "
                                  "default: the expression's own)")


class AddColumns(_TableRequest):
    """``AlterTableAddColumnsRequest`` -> ``Table.add_columns``."""

    op: Literal["add_columns"] = "add_columns"
    new_columns: list[AddColumnsEntry] = Field(min_length=1)


class ColumnAlteration(_Model):
    """``AlterColumnsEntry`` -> one alteration of ``Table.alter_columns``."""

    path: str
    rename: str | None = None
    nullable: bool | None = None
    data_type: Annotated[Any, PlainSerializer(lambda t: None if t is None else str(t), return_type=str | None,
                                              when_used="json")] = Field(
        default=None, description="the new type of a plain column: a pyarrow type in-process, its name on the wire")
    udf: PickledFunction | None = None
    input_columns: list[str] | None = None


class AlterColumns(_TableRequest):
    """``AlterTableAlterColumnsRequest`` -> ``Table.alter_columns``."""

    op: Literal["alter_columns"] = "alter_columns"
    alterations: list[ColumnAlteration] = Field(min_length=1)


class DropColumns(_TableRequest):
    """``AlterTableDropColumnsRequest`` -> ``Table.drop_columns``."""

    op: Literal["drop_columns"] = "drop_columns"
    columns: list[str] = Field(min_length=1)


# ---------------------------------------------------------------- indexes
class CreateIndex(_TableRequest):
    """``CreateTableIndexRequest`` -> ``Table.create_index`` (vector types) / ``create_scalar_index``."""

    op: Literal["create_index"] = "create_index"
    column: str | None = Field(default=None, description="the column (default: the table's one vector column)")
    index_type: str = "IVF_PQ"
    name: str | None = None
    distance_type: str = "l2"
    num_partitions: int | None = None
    num_sub_vectors: int | None = None
    num_bits: int = 8
    replace: Any = Field(default=True, description="True or False; checked with the index (naming table and column)")
    sample_rate: int = 256
    m: int | None = None
    ef_construction: int | None = None
    max_iterations: int | None = Field(default=None, description="IVF k-means iterations at most (Lance's 50)")
    target_partition_size: int | None = Field(default=None, description="rows per IVF partition (or num_partitions)")
    # a full-text (INVERTED / FTS) index's tokenizer, Lance's names; unset: Lance's defaults (FtsConfig)
    with_position: bool | None = None
    base_tokenizer: str | None = None
    language: str | None = None
    max_token_length: int | None = None
    lower_case: bool | None = None
    stem: bool | None = None
    remove_stop_words: bool | None = None
    ascii_folding: bool | None = None

    def fts_settings(self) -> dict[str, Any]:
        """The tokenizer settings given (those of :class:`~index_models.FtsConfig`)."""
        return {k: v for k in index_models.FtsConfig.model_fields if (v := getattr(self, k)) is not None}


class ListIndices(_TableRequest):
    """``ListTableIndicesRequest`` -> ``Table.list_indices``."""

    op: Literal["list_indices"] = "list_indices"


class IndexStats(_TableRequest):
    """``DescribeTableIndexStats`` -> ``Table.index_stats(index_name)``."""

    op: Literal["index_stats"] = "index_stats"
    index_name: str


class DropIndex(_TableRequest):
    """``DropTableIndexRequest`` -> Lance's ``drop_index(index_name)``."""

    op: Literal["drop_index"] = "drop_index"
    index_name: str


# ---------------------------------------------------------------- job records (the extension)
class GetJob(_Model):
    """-> ``Connection.get_job(job_id)``."""

    op: Literal["get_job"] = "get_job"
    job_id: str = Field(min_length=1)


class ListJobs(_Model):
    """-> ``Connection.list_jobs(table, status=, kind=)``; ``id`` (a table) narrows it."""

    op: Literal["list_jobs"] = "list_jobs"
    id: list[str] | None = None
    status: str | None = None
    kind: str | None = None


class CancelJob(_Model):
    """-> ``Connection.cancel_job(job_id)``."""

    op: Literal["cancel_job"] = "cancel_job"
    job_id: str = Field(min_length=1)


Operation = Annotated[
    BackfillColumn | CreateView | RefreshView | AddColumns | AlterColumns | DropColumns | CreateIndex | ListIndices
    | IndexStats | DropIndex | GetJob | ListJobs | CancelJob,
    Field(discriminator="op"),
]
OPERATION: TypeAdapter[Operation] = TypeAdapter(Operation)

#: the requests that run as a job (``submit`` takes them)
JOB_OPERATIONS = (BackfillColumn, RefreshView, CreateIndex)
#: one of them, told apart by ``op``
JobRequest = Annotated[BackfillColumn | RefreshView | CreateIndex, Field(discriminator="op")]


class RemoteJob(_Model):
    """A job request as a runner in another process carries it: the conf of a ``geneva_namespace_jobs`` DAG run
    (what a ``GenevaNamespace`` with ``job_runner=airflow`` triggers).  The request's ``id`` is the table's whole
    path -- its namespace, then its name -- and the only place the namespace is given (:attr:`namespace`)."""

    request: JobRequest
    db: str | None = Field(None, description="the namespace's root: the database the job runs on")
    db_conn_id: str | None = Field(None, description="the connection the runner opens that database with")

    @property
    def namespace(self) -> list[str]:
        """The child namespace the request's table is in (``["team_a"]`` for id ``["team_a", "docs"]``; [] for the
        root's tables)."""
        return self.request.id[:-1]

    @classmethod
    def of(cls, conf: Any, who: str) -> RemoteJob:
        """The job of ``conf`` (a dict, e.g. a DAG run's conf); InvalidArgumentError naming ``who`` and each bad
        field -- an op that is no job, or a ``namespace`` given besides the request's ``id`` -- otherwise."""
        request = conf.get("request") if isinstance(conf, dict) else None
        ops = sorted(kind.model_fields["op"].default for kind in JOB_OPERATIONS)
        if not isinstance(request, dict) or request.get("op") not in ops:
            raise InvalidArgumentError(f"{who}: the request's op must be one of {ops}, got "
                                       f"{request.get('op') if isinstance(request, dict) else request!r}")
        if "namespace" in conf:
            raise InvalidArgumentError(f"{who}: the conf takes no 'namespace' (got {conf['namespace']!r}): the "
                                       f"request's id names the table's namespace, then the table "
                                       f"({request.get('id')!r})")
        try:
            return cls.model_validate(conf)
        except ValidationError as exc:
            raise _invalid(exc, f"{who} conf") from None


def parse_operation(data: str | bytes | dict[str, Any]) -> Operation:
    """One request from its JSON (text or a decoded dict); InvalidArgumentError naming each bad field."""
    try:
        if isinstance(data, dict):
            return OPERATION.validate_python(data)
        return OPERATION.validate_json(data)
    except ValidationError as exc:
        raise _invalid(exc, "operation request") from None


def request(model: type[M], /, **fields: Any) -> M:
    """``kind(**fields)``, with InvalidArgumentError naming each bad field (the facade builds its requests so)."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise _invalid(exc, model.__name__) from None


def _invalid(exc: ValidationError, what: str) -> InvalidArgumentError:
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']} (got {e.get('input')!r})"
                         for e in exc.errors())
    return InvalidArgumentError(f"bad {what}: {problems}")


# ---------------------------------------------------------------- responses
class JobAccepted(_Model):
    """The job was started (``submit``); poll it with :class:`GetJob`."""

    job_id: str


class JobInfo(_Model):
    job: JobRecord


class JobList(_Model):
    jobs: list[JobRecord]


class ColumnsChanged(_Model):
    """The table's version after an add / alter / drop of columns."""

    version: int


class IndexList(_Model):
    indexes: list[index_models.IndexStats]


class IndexStatsInfo(_Model):
    stats: index_models.IndexStats


class ViewCreated(_Model):
    """The new view's version, and the id of its first refresh when ``with_no_data=False``."""

    version: int
    job_id: str | None = None
