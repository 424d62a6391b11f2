"""Chunker and batch-UDTF view metadata: what the view expands from which source, and its reserved columns (core).

A UDTF view is a Lance table (stable row ids) whose schema metadata records its source query, the
source version its rows were expanded from and the pickled UDTF.  Each row of a chunker view names its
parent -- ``__source_row_id`` (the source's stable row id), ``__chunk_index`` (its place among the
parent's rows) and ``__source_fp`` (a fingerprint of the parent's inputs) -- so a row can always be
traced to its parent and a refresh can tell which parents changed.  Rows of a batch-UDTF view carry
their partition's key hash and fingerprint instead.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from geneva_provider.core.contracts.kinds import DigestScheme, UDTFKind
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.store.layout import md5_hex
from geneva_provider.core.views.meta import SOURCE_ROW_ID

CHUNK_INDEX = "__chunk_index"
SOURCE_FP = "__source_fp"
PARTITION = "__partition"        # a batch UDTF's row: the hash of its partition's key
PARTITION_FP = "__partition_fp"  # ... and the fingerprint of the partition's input rows it came from

META_UDTF_VIEW = "geneva::view::udtf"          # the stored spec (JSON): what makes a table a UDTF view
META_UDTF_PICKLE = "geneva::udtf::pickle"      # the UDTF, pickled by value (base64)
META_UDTF_BASE_VERSION = "geneva::udtf::base_table_version"  # the source version the rows are expanded from
META_UDTF_PENDING = "geneva::udtf::pending"    # parents whose expansion the error policy skipped (JSON ids)
META_UDTF_PARTITIONS = "geneva::udtf::partitions"  # a batch UDTF: partition hash -> fingerprint (JSON)
META_UDTF_GENERATION = "geneva::udtf::generation"  # completed refreshes: names a refresh's checkpoints
META_UDTF_SOURCE_TXN = "geneva::udtf::source_transaction"  # the uuid of the held source version's commit
META_UDTF_VIEW_VERSION = "geneva::udtf::view_version"  # the view's version when the metadata was written
META_UDTF_FINGERPRINTS = "geneva::udtf::fingerprints"  # the DigestScheme of the parents' fingerprints
META_UDTF_PINNED = "geneva::udtf::pinned_version"  # made of a checked-out source version: where it stays
NOT_REFRESHED = -1


class UdtfViewSpec(BaseModel):
    """The stored spec of a chunker or batch-UDTF view."""

    model_config = ConfigDict(extra="forbid")

    kind: UDTFKind
    base_table: str
    base_table_db_uri: str
    where: str | None = None
    columns: dict[str, str] = {}   # view column -> source column, carried from each parent
    udtf: str                      # the UDTF's name
    version: str                   # ... and version
    input_columns: list[str]       # source columns the UDTF reads
    partition_by: str | None = None
    max_rows_per_fragment: int | None = None  # of the fragments a refresh appends (its option overrides it)

    def read_columns(self) -> list[str]:
        """Every source column the view reads: carried ones, the UDTF's inputs, the partition key."""
        cols = [*self.columns.values(), *self.input_columns, *([self.partition_by] if self.partition_by else [])]
        return list(dict.fromkeys(cols))

    def fragment_columns(self, outputs: list[str]) -> list[str]:
        """The columns a refresh's new fragments hold: the copied ones, the UDTF's ``outputs``, the package's own."""
        return [*self.columns, *outputs, *(f.name for f in self.reserved_fields())]

    def reserved_fields(self) -> list[pa.Field]:
        """The columns the package keeps beside the UDTF's output, by view kind."""
        if self.kind is UDTFKind.CHUNKER:
            return [pa.field(SOURCE_ROW_ID, pa.int64(), nullable=False), pa.field(CHUNK_INDEX, pa.int32()),
                    pa.field(SOURCE_FP, pa.uint64())]
        return [pa.field(PARTITION, pa.uint64()), pa.field(PARTITION_FP, pa.uint64())]


class UdtfViewState(BaseModel):
    """A UDTF view's metadata, parsed: its spec, its UDTF's pickle and how far it has been refreshed."""

    spec: UdtfViewSpec
    pickle: str
    base_version: int = NOT_REFRESHED
    pending: list[int] = []               # chunker: parents to expand again (their calls were skipped)
    partitions: dict[str, int] = {}       # batch UDTF: str(partition hash) -> fingerprint of its rows
    generation: int = 0                   # how many refreshes completed (a rerun of one keeps its checkpoints)
    source_transaction: str | None = None  # which table the held version belongs to (a re-created one differs)
    view_version: int | None = None       # rows created in the view after this came from an unfinished refresh
    fingerprints: DigestScheme = DigestScheme.BLAKE2B  # how its parents are fingerprinted (unrecorded: BLAKE2b)
    pinned_version: int | None = None     # made of a checked-out source version: refreshed there until moved

    @property
    def refreshed(self) -> bool:
        return self.base_version != NOT_REFRESHED

    @property
    def refresh_version(self) -> int | None:
        """The source version a refresh without one expands: a pinned view's (the one it holds once refreshed,
        which ``refresh(src_version=N)`` moves); None: the latest."""
        if self.pinned_version is None:
            return None
        return self.base_version if self.refreshed else self.pinned_version

    def seed(self) -> str:
        """What seeds a parent's fingerprint: the UDTF's version and the view's spec."""
        return md5_hex(f"{self.spec.version}:{self.spec.model_dump_json()}")


def _decoded(schema_metadata: dict[Any, Any] | None) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (schema_metadata or {}).items()}


def is_udtf_view(schema_metadata: dict[Any, Any] | None) -> bool:
    """True for the schema metadata of a chunker or batch-UDTF view."""
    return META_UDTF_VIEW in _decoded(schema_metadata)


def udtf_view_state(schema_metadata: dict[Any, Any] | None, name: str) -> UdtfViewState:
    """The view's spec and refresh state; InvalidArgumentError if the table is not a UDTF view."""
    md = _decoded(schema_metadata)
    if META_UDTF_VIEW not in md:
        raise InvalidArgumentError(f"table '{name}' is not a chunker or UDTF view")
    return UdtfViewState(spec=UdtfViewSpec.model_validate_json(md[META_UDTF_VIEW]), pickle=md[META_UDTF_PICKLE],
                         base_version=int(md.get(META_UDTF_BASE_VERSION, NOT_REFRESHED)),
                         pending=json.loads(md.get(META_UDTF_PENDING, "[]")),
                         partitions=json.loads(md.get(META_UDTF_PARTITIONS, "{}")),
                         generation=int(md.get(META_UDTF_GENERATION, 0)),
                         source_transaction=md.get(META_UDTF_SOURCE_TXN) or None,
                         view_version=int(md[META_UDTF_VIEW_VERSION]) if META_UDTF_VIEW_VERSION in md else None,
                         fingerprints=DigestScheme(md.get(META_UDTF_FINGERPRINTS, DigestScheme.BLAKE2B.value)),
                         pinned_version=int(md[META_UDTF_PINNED]) if md.get(META_UDTF_PINNED) else None)


def udtf_view_metadata(spec: UdtfViewSpec, pickle_b64: str, pinned_version: int | None = None) -> dict[str, str]:
    """The schema metadata that makes a new table a UDTF view of ``spec`` (not refreshed yet), its parents
    fingerprinted with XXH3; ``pinned_version``: made of that source version (a checked-out handle's query)."""
    return {META_UDTF_VIEW: spec.model_dump_json(), META_UDTF_PICKLE: pickle_b64,
            META_UDTF_BASE_VERSION: str(NOT_REFRESHED), META_UDTF_FINGERPRINTS: DigestScheme.XXH3.value,
            **({META_UDTF_PINNED: str(pinned_version)} if pinned_version is not None else {})}


def refreshed_metadata(base_version: int, pending: list[int], partitions: dict[str, int] | None, *,
                       generation: int, source_transaction: str | None, view_version: int
                       ) -> dict[str, str | None]:
    """The metadata a refresh leaves: the source version it expanded (and which table's: the uuid of that
    version's commit), what stays pending, the partitions, the refresh's generation, and the view's version
    just before this metadata is written (rows created after it were committed by a refresh that did not
    finish)."""
    md: dict[str, str | None] = {META_UDTF_BASE_VERSION: str(base_version),
                                 META_UDTF_PENDING: json.dumps(sorted(pending)),
                                 META_UDTF_GENERATION: str(generation),
                                 META_UDTF_SOURCE_TXN: source_transaction or "",
                                 META_UDTF_VIEW_VERSION: str(view_version)}
    if partitions is not None:
        md[META_UDTF_PARTITIONS] = json.dumps(partitions, sort_keys=True)
    return md
