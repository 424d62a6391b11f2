"""The typed contracts of an index build: what to build (``IndexSpec``), its trained artifacts, its plan, its
finished segments and what a build or refresh reports (core).

An index build runs on the driver (plan, train, commit) and on Spark tasks (one segment per fragment group),
and may be killed and run again: everything a later step or a rerun needs is one of these models, stored in
the checkpoint store in its one JSON encoding (keys in :mod:`geneva_provider.core.store.layout`).  The names
are LanceDB's and the reference's (``index_type``, ``metric``, ``num_partitions``, ``num_sub_vectors``,
``num_bits``, ``replace``, ``name``).  What can be checked without the table is checked here, naming the
value; what needs the table's schema and rows is checked by ``pipeline/indexes/checks.py``.
"""

from __future__ import annotations

import base64
import io
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.lineage_models import Committed
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.wording import counted

METRICS = ("l2", "cosine", "dot")
NUM_BITS = (4, 8)
# How many rows PQ training wants per code of the codebook at the least (2**num_bits codes per sub-vector):
# a table with fewer rows than 2**num_bits * MIN_ROWS_PER_CODE is refused ("too few rows to train PQ").
MIN_ROWS_PER_CODE = 4


class IndexType(StrEnum):
    """The index types a build makes: IVF vector indexes, scalar indexes and full-text (``INVERTED``)."""

    IVF_PQ = "IVF_PQ"
    IVF_FLAT = "IVF_FLAT"
    IVF_SQ = "IVF_SQ"
    IVF_HNSW_SQ = "IVF_HNSW_SQ"
    IVF_HNSW_PQ = "IVF_HNSW_PQ"
    BTREE = "BTREE"
    BITMAP = "BITMAP"
    LABEL_LIST = "LABEL_LIST"
    INVERTED = "INVERTED"

    @property
    def is_vector(self) -> bool:
        return self.value.startswith("IVF_")

    @property
    def trains_pq(self) -> bool:
        """A PQ codebook is trained once on the driver and shared by every segment."""
        return self.value.endswith("_PQ")

    @property
    def merges_segments(self) -> bool:
        """Whether a build's segments are merged into one before the commit.

        SQ segments never are: each learns its own quantization bounds from its rows, and merged segments keep
        one segment's bounds for all (recall fell 1.00 -> 0.6 on skewed fragments, lance.md §13).  Every other
        type shares what it trained (centroids, codebook) or trains nothing, and a merged segment lets
        compaction coalesce the fragments it covers.
        """
        return not self.value.endswith("_SQ")


_ALIASES = {"FTS": IndexType.INVERTED}


class FtsConfig(BaseModel):
    """The one tokenizer configuration every segment of a full-text index is built with (Lance's names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_tokenizer: str = "simple"
    language: str = "English"
    with_position: bool = False
    max_token_length: int | None = Field(default=40, ge=0)  # None: no limit
    lower_case: bool = True
    stem: bool = True
    remove_stop_words: bool = True
    ascii_folding: bool = True


class IndexSpec(BaseModel):
    """What index to build on which column, with the parameters LanceDB and the reference name.

    ``num_partitions`` / ``num_sub_vectors`` left unset are chosen from the table when the build is planned
    (``sqrt(rows)`` partitions; ``dimension / 16`` sub-vectors, or ``/ 8``, ``/ 4``... whichever divides).
    ``sample_rate``: training rows per IVF partition (and per PQ code), lowered to what the table holds.
    ``target_partition_size`` (rows per partition) is Lance's alternative to ``num_partitions``;
    ``max_iterations`` bounds the IVF k-means (Lance's 50 when unset).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    column: str
    index_type: IndexType = IndexType.IVF_PQ
    metric: str = "l2"
    num_partitions: int | None = None
    num_sub_vectors: int | None = None
    num_bits: int = 8
    name: str | None = None
    replace: bool = True
    sample_rate: int = 256
    m: int | None = None                # HNSW: neighbours per graph node (None: Lance's 20)
    ef_construction: int | None = None  # HNSW: candidates kept while building the graph (None: Lance's 150)
    max_iterations: int | None = None  # IVF k-means iterations at most (None: Lance's 50)
    target_partition_size: int | None = None  # rows per IVF partition: num_partitions = ceil(rows / it)
    fts: FtsConfig | None = None

    @classmethod
    def of(cls, column: str, index_type: Any = "IVF_PQ", *, table: str | None = None, **params: Any) -> IndexSpec:
        """The spec of these arguments; InvalidArgumentError naming the table (when given), the column, the argument
        and the value when one is bad."""
        subject = "create_index" + (f" on table '{table}'" if table else "")
        if not isinstance(column, str) or not column:
            raise InvalidArgumentError(f"{subject}: the column must be a column name, got {column!r}")
        subject += f" {'column' if table else 'on column'} '{column}'"
        kind = parse_index_type(index_type, subject)
        metric = params.get("metric", "l2")
        if not isinstance(metric, str) or metric.lower() not in METRICS:
            raise InvalidArgumentError(f"{subject}: metric must be one of {list(METRICS)}, "
                                       f"got {metric!r}")
        params["metric"] = metric.lower()
        for arg in ("num_partitions", "num_sub_vectors", "sample_rate", "m", "ef_construction", "max_iterations",
                    "target_partition_size"):
            value = params.get(arg)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidArgumentError(f"{subject}: {arg} must be a positive whole "
                                           f"number, got {value!r}")
        if params.get("num_bits", 8) not in NUM_BITS or isinstance(params.get("num_bits"), bool):
            raise InvalidArgumentError(f"{subject}: num_bits must be one of "
                                       f"{list(NUM_BITS)}, got {params.get('num_bits')!r}")
        ivf = [arg for arg in ("max_iterations", "target_partition_size") if params.get(arg) is not None]
        if ivf and not kind.is_vector:
            raise InvalidArgumentError(f"{subject}: {ivf[0]}={params[ivf[0]]!r} is for a vector (IVF) index, not "
                                       f"{kind.value}")
        if params.get("target_partition_size") is not None and params.get("num_partitions") is not None:
            raise InvalidArgumentError(f"{subject}: num_partitions={params['num_partitions']!r} and "
                                       f"target_partition_size={params['target_partition_size']!r} both size the IVF "
                                       "partitions; give one of them")
        hnsw = [arg for arg in ("m", "ef_construction") if params.get(arg) is not None]
        if hnsw and "HNSW" not in kind.value:
            raise InvalidArgumentError(f"{subject}: {hnsw[0]}={params[hnsw[0]]!r} is for an HNSW index "
                                       f"(IVF_HNSW_SQ, IVF_HNSW_PQ), not {kind.value}")
        name = params.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidArgumentError(f"{subject}: name must be a non-empty string (or None: '<column>_idx'), got "
                                       f"{name!r}")
        if not isinstance(params.get("replace", True), bool):
            raise InvalidArgumentError(f"{subject}: replace must be True or False, got {params['replace']!r}")
        if kind is IndexType.INVERTED and params.get("fts") is None:
            params["fts"] = FtsConfig()
        elif kind is not IndexType.INVERTED and params.get("fts") is not None:
            raise InvalidArgumentError(f"{subject}: a tokenizer configuration is for an "
                                       f"INVERTED (full-text) index, not {kind.value}")
        try:
            return cls(column=column, index_type=kind, **params)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidArgumentError(f"{subject}: {where}: {first['msg']} "
                                       f"(got {first.get('input')!r})") from None

    @property
    def index_name(self) -> str:
        """The index's name in the table: ``name``, or ``<column>_idx`` as LanceDB names it."""
        return self.name or f"{self.column}_idx"

    def lance_params(self) -> dict[str, Any]:
        """The keyword arguments of ``create_index_uncommitted`` this spec fixes (artifacts are added apart)."""
        if self.index_type.is_vector:
            params: dict[str, Any] = {"metric": self.metric, "m": self.m, "ef_construction": self.ef_construction}
            if self.index_type.trains_pq:  # the codebook's width: Lance reads 8 bits unless told
                params["num_bits"] = self.num_bits
            return {k: v for k, v in params.items() if v is not None}
        if self.index_type is IndexType.INVERTED and self.fts is not None:
            return self.fts.model_dump(exclude_none=True)
        return {}


class IndexRefresh(BaseModel):
    """A refresh of the existing index ``index_name``: add-only with its saved artifacts, or built again from a
    new training (``retrain``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index_name: str
    retrain: bool = False

    @classmethod
    def of(cls, index_name: Any, retrain: Any = False) -> IndexRefresh:
        """The request of these arguments; InvalidArgumentError naming the argument and value when one is bad."""
        if not isinstance(index_name, str) or not index_name:
            raise InvalidArgumentError(f"refresh_index: the index name must be a non-empty string, got {index_name!r}")
        if not isinstance(retrain, bool):
            raise InvalidArgumentError(f"refresh_index of index '{index_name}': retrain must be True or False, "
                                       f"got {retrain!r}")
        return cls(index_name=index_name, retrain=retrain)


def parse_index_type(value: Any, subject: str = "create_index") -> IndexType:
    """``value`` (any case, or an alias such as ``FTS``) as an IndexType; InvalidArgumentError naming ``subject``
    and listing the types otherwise."""
    name = value.upper() if isinstance(value, str) else value
    try:
        return _ALIASES.get(name) or IndexType(name)
    except ValueError:
        raise InvalidArgumentError(f"{subject}: unknown index_type {value!r}; one of "
                                   f"{[t.value for t in IndexType] + list(_ALIASES)}") from None


def array_to_text(array: Any) -> str:
    """A numpy array as base64 ``.npy`` bytes (exact, with its shape and dtype)."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def text_to_array(text: str) -> Any:
    import numpy as np

    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


class IndexArtifacts(BaseModel):
    """An index's resolved spec and what was trained once on the driver (IVF centroids, PQ codebook).

    An add-only refresh and a resumed build encode their segments with these, never retraining: segments of
    one index share one model, so they can be merged and searched together (Lance keeps no reader for a
    committed PQ codebook, lance#7319, so the package keeps its own copy).  Scalar and full-text indexes train
    nothing: their record keeps the spec (and the one tokenizer configuration) a refresh builds with.
    """

    model_config = ConfigDict(extra="forbid")

    spec: IndexSpec  # with num_partitions / num_sub_vectors resolved
    dimension: int | None = None
    trained_at_version: int
    trained_rows: int = 0
    centroids: str | None = None  # base64 .npy, num_partitions x dimension float32
    codebook: str | None = None  # base64 .npy, PQ types only
    # The mean distance of a sample of the training rows to their nearest centroid: what a refresh compares the
    # new rows' with (the drift rule, pipeline/indexes/drift.py); None for indexes trained before it was recorded.
    centroid_distance: float | None = None

    def matches(self, spec: IndexSpec) -> bool:
        """Whether these artifacts were trained for ``spec`` (unset partitions / sub-vectors match any)."""
        mine = self.spec
        return (mine.column, mine.index_type, mine.metric, mine.num_bits, mine.fts) == (
            spec.column, spec.index_type, spec.metric, spec.num_bits, spec.fts) and \
            spec.num_partitions in (None, mine.num_partitions) and spec.num_sub_vectors in (None, mine.num_sub_vectors)

    def lance_args(self) -> dict[str, Any]:
        """The artifacts as ``create_index_uncommitted`` takes them (none for scalar and full-text indexes)."""
        args: dict[str, Any] = {}
        if self.centroids is not None:
            args.update(num_partitions=self.spec.num_partitions, ivf_centroids=_fixed_size_list(self.centroids))
        if self.codebook is not None:
            args.update(num_sub_vectors=self.spec.num_sub_vectors, pq_codebook=_fixed_size_list(self.codebook))
        return args


def _fixed_size_list(text: str) -> Any:
    """A stored 2-d array as the FixedSizeListArray Lance's trained models hold (rows of equal length)."""
    import pyarrow as pa

    array = text_to_array(text)
    return pa.FixedSizeListArray.from_arrays(pa.array(array.ravel()), array.shape[1])


class IndexBuildPlan(BaseModel):
    """One build or refresh: the pinned version, the contiguous fragment groups (one segment each) and what the
    commit replaces.  Its ``build_id`` is a digest of all of it, so a rerun of a killed build at the same version
    finds the same id and the segments it finished."""

    model_config = ConfigDict(extra="forbid")

    build_id: str
    table: str
    table_uri: str
    store_uri: str
    read_version: int
    spec: IndexSpec
    groups: list[list[int]]
    rows: int
    refresh: bool = False  # add-only: only fragments no segment covers; the existing segments stay
    replaces: list[str] = []  # uuids of the index's segments the commit removes (a rebuild with replace)
    group_rows: list[int] = []  # the rows of each group (what a finished segment moves the job's progress by)
    field_id: int
    artifacts: IndexArtifacts  # what every segment of this build is encoded with (saved for refreshes at commit)
    drift: float | None = None  # a refresh's measured drift of the rows it indexes (pipeline/indexes/drift.py)


class SegmentRecord(BaseModel):
    """A finished segment of a build: its group, and the uncommitted ``lance.dataset.Index`` pickled (base64)."""

    model_config = ConfigDict(extra="forbid")

    build_id: str
    group: int
    fragment_ids: list[int]
    index: str

    def lance_index(self) -> Any:
        import pickle

        return pickle.loads(base64.b64decode(self.index))


class SegmentTaskResult(BaseModel):
    """What one segment task reports: its group, whether it built the segment or found it finished."""

    model_config = ConfigDict(extra="forbid")

    group: int
    built: bool
    uuid: str


class IndexBuildResult(BaseModel):
    """What a build or refresh did: segments built by tasks now, reused from a killed run, and committed."""

    model_config = ConfigDict(extra="forbid")

    stage: Literal[Stage.INDEX] = Stage.INDEX  # what a stage report's result is told apart by
    job_id: str | None = None  # the job that built it (None: nothing to do, no job ran)
    index_name: str
    build_id: str | None = None
    version: int
    segments_built: int = 0
    segments_reused: int = 0
    segments_committed: int = 0
    segments_per_task: list[int] = []
    fragments_indexed: list[int] = []
    rows_indexed: int = 0
    rows_reused: int = 0  # of the rows indexed, those of segments an earlier (killed) run had finished
    trained: bool = False
    refresh: bool = False
    seconds: dict[str, float] = {}  # "total": the stage's wall time
    # The refreshed rows' centroid distance over the training rows' (pipeline/indexes/drift.py); None: not measured.
    drift: float | None = None

    def committed(self) -> Committed:
        """What lineage reports of it: the version left and the rows it indexed."""
        return Committed(version=self.version, rows=self.rows_indexed)

    @property
    def nothing_to_do(self) -> bool:
        return not self.fragments_indexed

    def describe(self) -> str:
        """What it did, in the one wording of its log line and the CLI's answer."""
        if self.nothing_to_do:
            return f"index '{self.index_name}': nothing to do at version {self.version}"
        return (f"index '{self.index_name}': {'refreshed' if self.refresh else 'built'} over "
                f"{counted(len(self.fragments_indexed), 'fragment')} ({counted(self.rows_indexed, 'row')}) in "
                f"{counted(self.segments_committed, 'segment')} ({self.segments_built} built, {self.segments_reused} "
                f"from an earlier run) at version {self.version}")


class IndexStats(BaseModel):
    """What ``index_stats`` says of one index: rows indexed / unindexed, segments, partitions.

    ``index_type`` is the name a build takes and LanceDB's ``IndexStatistics`` gives (``IVF_PQ``, ``BTREE``,
    ``BITMAP``, ``LABEL_LIST``, ``FTS``...).  LanceDB's other names are here too: ``distance_type`` (a vector
    index's metric, None for scalar and full-text indexes) and ``num_indices`` (its parts: our ``num_segments``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    index_type: str
    columns: list[str]
    num_indexed_rows: int
    num_unindexed_rows: int
    num_indexed_fragments: int
    num_unindexed_fragments: int
    num_segments: int
    num_partitions: int | None = None
    distance_type: str | None = None
    loss: float | None = None  # a vector index's k-means training loss, summed over its segments (LanceDB's name)

    @property
    def num_indices(self) -> int:
        """LanceDB's name of :attr:`num_segments` (the parts the index is split into)."""
        return self.num_segments
