"""Airflow Assets naming Lance tables and columns, so jobs can be scheduled on ingest and on each other."""

from __future__ import annotations

from airflow.sdk import Asset

from geneva_provider.core.catalog import check_table_name
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.lance import LanceHook


def table_asset(table: str, column: str | None = None, lance_conn_id: str = LanceHook.default_conn_name) -> Asset:
    """``lance://<conn id>/<table>`` (what ingest jobs emit) or ``.../<table>/<column>`` (what a backfill emits).

    The URI names the connection rather than the storage location, so it is known when the DAG
    is parsed and holds no secret.  A backfill emits the column's Asset rather than the table's,
    so a DAG scheduled on the table (backfill after ingest) is not re-triggered by its own result;
    the event's extra carries the table, column and committed version.  A name no table can have
    ("a/b", "") is refused: its URI would name another Asset or none.
    """
    check_table_name(table)
    if column is not None and (not isinstance(column, str) or not column.strip() or "/" in column):
        raise InvalidArgumentError(f"table_asset of table '{table}': column must be a column name, got {column!r}")
    suffix = f"/{column}" if column else ""
    name = f"lance.{lance_conn_id}.{table}" + (f".{column}" if column else "")
    return Asset(name=name, uri=f"lance://{lance_conn_id}/{table}{suffix}")
