"""LanceHook: a Lance database (URI + storage options) from an Airflow connection."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

import geneva_provider as gp


class LanceHook(BaseHook):
    """Opens the geneva database named by a ``lance`` connection.

    The connection's ``host`` is the database URI (a directory or an object-store prefix such
    as ``s3://bucket/lake``); its extra ``storage_options`` (a JSON object) holds credentials and
    settings for the object store.  Option values are registered as secrets, so they are
    masked in task logs, and they are never returned in XCom.
    """

    conn_name_attr = "lance_conn_id"
    default_conn_name = "lance_default"
    conn_type = "lance"
    hook_name = "Lance"

    def __init__(self, lance_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.lance_conn_id = lance_conn_id
        self._db: gp.Connection | None = None

    def get_conn(self) -> gp.Connection:
        """The core database connection (opened once per hook)."""
        if self._db is None:
            conn = self.get_connection(self.lance_conn_id)
            extra = conn.extra_dejson or {}
            uri = extra.get("uri") or conn.host
            if not uri:
                raise ValueError(f"connection '{self.lance_conn_id}' has no database URI: set its host "
                                 "(or extra 'uri') to a directory or object-store prefix")
            options = _storage_options(extra.get("storage_options"), self.lance_conn_id)
            _mask(options)
            self._db = gp.connect(uri, storage_options=options)
        return self._db

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self.get_conn().storage_options

    def open_table(self, name: str) -> gp.Table:
        return self.get_conn().open_table(name)

    def test_connection(self) -> tuple[bool, str]:
        try:
            names = self.get_conn().table_names()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, str(exc)
        return True, f"{len(names)} tables"


def _storage_options(raw: Any, conn_id: str) -> dict[str, str] | None:
    if raw in (None, "", {}):
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"connection '{conn_id}': extra 'storage_options' is not a JSON object") from None
    if not isinstance(raw, dict):
        raise ValueError(f"connection '{conn_id}': extra 'storage_options' must be a JSON object")
    return {str(k): str(v) for k, v in raw.items()}


def _mask(options: dict[str, str] | None) -> None:
    from airflow.sdk.log import mask_secret

    for value in (options or {}).values():
        if len(value) >= 4:  # masking tiny values ("1", "true") would garble every log line
            mask_secret(value)
