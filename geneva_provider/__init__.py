"""airflow-provider-geneva: UDF columns over Lance tables, computed with Spark, scheduled by Airflow.

Layers, dependencies pointing down only (see the README's "Layout")::

    hooks/ operators/ sensors/ triggers/ task_groups assets get_provider_info   the Airflow surface
    facade/ (connect, Connection, Table, Query) and stages                      the notebook API
    pipeline/ (plan, apply, write, commit, verify, runner)                      the stages
    core/ (refs, catalog, udf, checkpoint, ranges, options, models, view_meta)  plain data

Airflow imports this package in every process (scheduler, dag-processor, triggerer), so it
imports nothing heavy: the public names below are loaded on first use (PEP 562)::

    import geneva_provider as gp
    db = gp.connect("/data/lake")
    tbl = db.open_table("events")
    tbl.add_columns({"y": double})
    tbl.backfill("y")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from geneva_provider.core.lance_logging import quiet_commit_warnings
from geneva_provider.core.version import __version__
from geneva_provider.namespace_plugin import register as _register_namespace

quiet_commit_warnings()  # before anything imports lance: Lance reads its log filter once, at import
_register_namespace()  # lance_namespace.connect("geneva", ...): registered when lance_namespace is imported

# Public name -> the module that defines it.
_EXPORTS = {
    "connect": "geneva_provider.facade.connection",
    "Connection": "geneva_provider.facade.connection",
    "Table": "geneva_provider.facade.table",
    "Query": "geneva_provider.facade.query",
    "GenevaQueryBuilder": "geneva_provider.core.query_builder",
    "UDF": "geneva_provider.core.functions.udf",
    "UDFKind": "geneva_provider.core.functions.udf",
    "udf": "geneva_provider.core.functions.udf",
    "Columns": "geneva_provider.core.functions.udf",
    "UnpackedUDF": "geneva_provider.core.functions.udf",
    "computed": "geneva_provider.core.functions.computed",
    "Computed": "geneva_provider.core.functions.computed",
    "UDTF": "geneva_provider.core.functions.udtf",
    "chunker": "geneva_provider.core.functions.udtf",
    "scalar_udtf": "geneva_provider.core.functions.udtf",
    "udtf": "geneva_provider.core.functions.udtf",
    "task_gpus": "geneva_provider.core.devices",
    "task_device": "geneva_provider.core.devices",
    "local_session": "geneva_provider.pipeline.spark.runner",
    "GenevaManifest": "geneva_provider.core.manifest",
    "SparkCluster": "geneva_provider.core.manifest",
    "ExecutionContext": "geneva_provider.facade.contexts",
    "local_context": "geneva_provider.facade.contexts",
    "local_ray_context": "geneva_provider.facade.contexts",
    "BackfillOptions": "geneva_provider.core.contracts.options",
    "RefreshOptions": "geneva_provider.core.contracts.options",
    "BackfillResult": "geneva_provider.core.contracts.models",
    "CheckpointStore": "geneva_provider.core.store.checkpoint",
    "InMemoryCheckpointStore": "geneva_provider.core.store.checkpoint",
    "LanceCheckpointStore": "geneva_provider.core.store.checkpoint",
    **{name: "geneva_provider.core.error_policy" for name in (
        "ErrorPolicy", "Retry", "Skip", "Fail", "retry_transient", "retry_all", "skip_on_error", "fail_fast")},
    **{name: "geneva_provider.core.errors" for name in (
        "GenevaError", "InvalidArgumentError", "TableNotFoundError", "TableExistsError", "ColumnError",
        "UDFDefinitionError",
        "UDFExecutionError", "UDFWorkerDiedError", "PlanFormatError", "CheckpointMissingError", "CommitError",
        "ColumnReplacedError", "VerificationError",
        "SparkEnvironmentError", "SparkServerUnreachableError", "ResourceUnavailableError", "StorageUnreachableError",
        "TableVersionGoneError", "StorageAccessError")},
}

__all__ = [
    "UDF", "BackfillOptions", "BackfillResult", "CheckpointMissingError", "CheckpointStore", "ColumnError", "Columns",
    "UnpackedUDF", "ColumnReplacedError",
    "CommitError", "Connection", "GenevaError", "GenevaQueryBuilder", "InMemoryCheckpointStore", "InvalidArgumentError",
    "LanceCheckpointStore", "PlanFormatError", "Query", "RefreshOptions", "ResourceUnavailableError",
    "SparkEnvironmentError", "SparkServerUnreachableError", "StorageAccessError",
    "StorageUnreachableError", "Table", "TableExistsError", "TableNotFoundError", "TableVersionGoneError",
    "UDFDefinitionError", "UDFExecutionError", "UDFKind", "UDFWorkerDiedError", "VerificationError", "__version__",
    "connect", "local_session", "task_device", "task_gpus", "udf",
    "ErrorPolicy", "Fail", "Retry", "Skip", "fail_fast", "retry_all", "retry_transient", "skip_on_error",
    "UDTF", "chunker", "scalar_udtf", "udtf", "Computed", "computed",
    "ExecutionContext", "GenevaManifest", "SparkCluster", "local_context", "local_ray_context",
]

if TYPE_CHECKING:
    from geneva_provider.core.contracts.models import BackfillResult
    from geneva_provider.core.contracts.options import BackfillOptions, RefreshOptions
    from geneva_provider.core.devices import task_device, task_gpus
    from geneva_provider.core.error_policy import (
        ErrorPolicy,
        Fail,
        Retry,
        Skip,
        fail_fast,
        retry_all,
        retry_transient,
        skip_on_error,
    )
    from geneva_provider.core.errors import (
        CheckpointMissingError,
        ColumnError,
        ColumnReplacedError,
        CommitError,
        GenevaError,
        InvalidArgumentError,
        PlanFormatError,
        ResourceUnavailableError,
        SparkEnvironmentError,
        SparkServerUnreachableError,
        StorageAccessError,
        StorageUnreachableError,
        TableExistsError,
        TableNotFoundError,
        TableVersionGoneError,
        UDFDefinitionError,
        UDFExecutionError,
        UDFWorkerDiedError,
        VerificationError,
    )
    from geneva_provider.core.functions.computed import Computed, computed
    from geneva_provider.core.functions.udf import UDF, Columns, UDFKind, UnpackedUDF, udf
    from geneva_provider.core.functions.udtf import UDTF, chunker, scalar_udtf, udtf
    from geneva_provider.core.manifest import GenevaManifest, SparkCluster
    from geneva_provider.core.query_builder import GenevaQueryBuilder
    from geneva_provider.core.store.checkpoint import CheckpointStore, InMemoryCheckpointStore, LanceCheckpointStore
    from geneva_provider.facade.connection import Connection, connect
    from geneva_provider.facade.contexts import ExecutionContext, local_context, local_ray_context
    from geneva_provider.facade.query import Query
    from geneva_provider.facade.table import Table
    from geneva_provider.pipeline.spark.runner import local_session


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'geneva_provider' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
