"""Helpers the Geneva operators and task groups share (private).

Kept free of lance / pyarrow / numpy / pyspark at module load: Airflow imports operators in
the scheduler and dag-processor, where only DAG structure matters.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geneva_provider.core.options import JobOptions
    from geneva_provider.core.udf import UDF

SPARK_OPTIONS = ("conf", "py_files", "env_vars", "spark_binary", "ship_package")


def take_options(cls: type[JobOptions], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Removes ``cls``'s options from an operator's kwargs (None when not given); the rest are BaseOperator's."""
    return {name: kwargs.pop(name, None) for name in cls.names()}


def parse_options(cls: type[JobOptions], operator: Any, job: str) -> JobOptions:
    """The operator's (rendered) option attributes as typed, validated options."""
    return cls.parse({name: getattr(operator, name) for name in cls.names()}, job=job)


def import_udf(reference: str) -> UDF:
    """Imports a UDF from ``"package.module:name"`` (or ``"package.module.name"``)."""
    from geneva_provider.core.udf import UDF

    module_name, sep, attr = reference.partition(":")
    if not sep:
        module_name, _, attr = reference.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImportError(f"cannot import UDF {reference!r}: {exc}") from exc
    if not isinstance(obj, UDF):
        raise TypeError(f"{reference!r} is a {type(obj).__name__}, not a @udf function")
    return obj


def lineage(table_uri: str | None, table: str, column: str | None) -> Any:
    """Input table and output column as OpenLineage datasets (the OpenLineage provider is optional)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    namespace, name = _dataset_name(table_uri or table)
    return OperatorLineage(inputs=[Dataset(namespace=namespace, name=name)],
                           outputs=[Dataset(namespace=namespace, name=f"{name}#{column}" if column else name)])


def _dataset_name(uri: str) -> tuple[str, str]:
    if "://" in uri:
        scheme, _, rest = uri.partition("://")
        bucket, _, path = rest.partition("/")
        return f"{scheme}://{bucket}", path
    return "file", uri
