"""airflow-provider-geneva: UDF columns over Lance tables, computed with Spark, scheduled by Airflow.

The pipeline core (this package minus ``hooks``, ``operators``, ``sensors`` and ``triggers``)
never imports Airflow, so it works from a notebook::

    import geneva_provider as gp
    db = gp.connect("/data/lake")
    tbl = db.open_table("events")
    tbl.add_columns({"y": double})
    tbl.backfill("y")
"""

from geneva_provider.backfill import BackfillResult
from geneva_provider.checkpoint import CheckpointStore, InMemoryCheckpointStore, LanceCheckpointStore
from geneva_provider.db import Connection, connect
from geneva_provider.errors import (
    CheckpointMissingError,
    ColumnError,
    CommitError,
    GenevaError,
    InvalidArgumentError,
    TableNotFoundError,
    UDFDefinitionError,
    UDFExecutionError,
    VerificationError,
)
from geneva_provider.plan import BackfillOptions
from geneva_provider.table import Table
from geneva_provider.udf import UDF, UDFKind, udf

__version__ = "0.1.0"

__all__ = [
    "UDF",
    "BackfillOptions",
    "BackfillResult",
    "CheckpointMissingError",
    "CheckpointStore",
    "ColumnError",
    "CommitError",
    "Connection",
    "GenevaError",
    "InMemoryCheckpointStore",
    "InvalidArgumentError",
    "LanceCheckpointStore",
    "Table",
    "TableNotFoundError",
    "UDFDefinitionError",
    "UDFExecutionError",
    "UDFKind",
    "VerificationError",
    "__version__",
    "connect",
    "udf",
]
