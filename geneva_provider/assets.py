"""Airflow Assets naming Lance tables and columns, so jobs can be scheduled on ingest and on each other."""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias, AssetWatcher

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


def lance_table_asset(table: str, lance_conn_id: str = LanceHook.default_conn_name, *, watch: bool = True,
                      poll_interval: float = 10.0, operations: list[str] | None = None,
                      columns: list[str] | None = None) -> Asset:
    """``table_asset(table)`` watched: an ``AssetWatcher`` whose trigger reports each change that matters.

    A DAG with ``schedule=[lance_table_asset("events")]`` runs after each change of the table made outside
    it -- an ingester's append, a notebook's delete -- and not after the package's own commits (see
    :class:`~geneva_provider.triggers.table.LanceTableChangedTrigger`, which ``poll_interval``, ``operations``
    and ``columns`` configure).  ``watch=False`` is ``table_asset(table)``.
    """
    from geneva_provider.triggers.table import LanceTableChangedTrigger

    asset = table_asset(table, lance_conn_id=lance_conn_id)
    if not watch:
        return asset
    trigger = LanceTableChangedTrigger(table=table, lance_conn_id=lance_conn_id, poll_interval=poll_interval,
                                       operations=operations, columns=columns)
    return Asset(name=asset.name, uri=asset.uri, watchers=[AssetWatcher(name=f"{asset.name}.changes", trigger=trigger)])


def index_asset(table: str, index: str, lance_conn_id: str = LanceHook.default_conn_name) -> Asset:
    """``lance://<conn id>/<table>/index/<index>``: what an index build or refresh emits when it committed.

    Not the table's Asset (a DAG scheduled on the table would be started again by its own index stage) and not a
    column's (no column name holds a "/").  The event's extra carries the table, the index, the version committed
    and the rows indexed.
    """
    check_table_name(table)
    if not isinstance(index, str) or not index.strip() or "/" in index:
        raise InvalidArgumentError(f"index_asset of table '{table}': index must be an index name, got {index!r}")
    return Asset(name=f"lance.{lance_conn_id}.{table}.index.{index}", uri=f"lance://{lance_conn_id}/{table}/index/{index}")


def index_alias(table: str, lance_conn_id: str = LanceHook.default_conn_name) -> AssetAlias:
    """The outlet of an index stage whose indexes are known only when it runs (a task group's): each refresh that
    committed adds an event of its :func:`index_asset`; a DAG may be scheduled on the alias or on one index's Asset.
    """
    check_table_name(table)
    return AssetAlias(name=f"lance.{lance_conn_id}.{table}.indexes")
