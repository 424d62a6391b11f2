"""What a job's lineage is, as plain data: which table it reads and writes, and each written column's inputs.

The planner knows it (the UDF's name, version and input columns, the view's copied columns, the filter) and the
plan summary carries it to the Airflow surface, which reports it as OpenLineage facets
(:mod:`geneva_provider.openlineage`).  No storage option is ever part of it: it names tables by URI only.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class EdgeKind(StrEnum):
    """How an output column comes from its input columns (OpenLineage's ``DIRECT`` subtypes)."""

    TRANSFORMATION = "TRANSFORMATION"  # computed by a UDF (or a UDTF) from them
    IDENTITY = "IDENTITY"              # copied as it is (a view's column)


class ColumnEdge(BaseModel):
    """One written column and the input table's columns its values come from."""

    model_config = ConfigDict(extra="forbid")

    column: str
    inputs: list[str]
    kind: EdgeKind
    description: str  # the UDF by name and version ("UDF embed version 3"), or "copied from column x"


class WrittenColumn(BaseModel):
    """A written column and its Arrow type (the schema of what the job writes)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str


class JobLineage(BaseModel):
    """A job's lineage: the input table (the table itself for a backfill, the source for a view) at the version
    read, the output table, each written column's edges, and the columns the filter reads (``where``)."""

    model_config = ConfigDict(extra="forbid")

    source_uri: str
    source_version: int | None  # None: not read yet (a table job's event before it ran)
    table_uri: str
    edges: list[ColumnEdge] = Field(default_factory=list)
    filter_columns: list[str] = Field(default_factory=list)  # input columns selecting the rows (INDIRECT / FILTER)
    group_columns: list[str] = Field(default_factory=list)   # input columns grouping the rows (a batch UDTF's key)
    written: list[WrittenColumn] = Field(default_factory=list)
    reads_only: bool = False  # a wait on the table (a sensor): an input, no output

    @classmethod
    def of_table(cls, table_uri: str, version: int | None = None, *, reads_only: bool = False) -> JobLineage:
        """A job on a table as a whole (a compaction, an index build, a clean-up, a wait): the table read at
        ``version`` and written, no column edges."""
        return cls(source_uri=table_uri, source_version=version, table_uri=table_uri, reads_only=reads_only)


class Committed(BaseModel):
    """What a job committed, as lineage reports it: the version it left and, when known, what it wrote."""

    model_config = ConfigDict(extra="forbid")

    version: int
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None


def udf_description(kind: str, name: str, version: str) -> str:
    """How an edge names the function computing a column: ``"UDF embed version 3"``."""
    return f"{kind} {name} version {version}"
