"""Airflow Assets naming Lance tables, so backfills can be scheduled on ingest and on each other."""

from __future__ import annotations

from airflow.sdk import Asset

from geneva_provider.hooks.lance import LanceHook


def table_asset(table: str, lance_conn_id: str = LanceHook.default_conn_name) -> Asset:
    """The Asset of ``table`` in the database of ``lance_conn_id``: ``lance://<conn id>/<table>``.

    The URI names the connection rather than the storage location, so it is known when the DAG
    is parsed (no connection lookup) and holds no secret; events carry the column and version
    in their extra.
    """
    return Asset(name=f"lance.{lance_conn_id}.{table}", uri=f"lance://{lance_conn_id}/{table}")
