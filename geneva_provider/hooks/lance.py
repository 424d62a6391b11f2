"""LanceHook: a Lance database (URI, storage options, namespace) from an Airflow connection.

Imported by Airflow in every process: nothing heavy at module load (the core is loaded lazily).
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.hooks.errors import airflow_connection

if TYPE_CHECKING:
    from collections.abc import Sequence

    from geneva_provider.core.catalog import Catalog
    from geneva_provider.core.table_events import TableSeen
    from geneva_provider.facade.connection import Connection
    from geneva_provider.facade.table import Table
    from geneva_provider.pipeline.table_probes import Probe


class LanceHook(BaseHook):
    """Opens the geneva database named by a ``lance`` connection.

    The connection's ``host`` (or extra ``uri``) is the database URI: a directory or an
    object-store prefix such as ``s3://bucket/lake``.  Extras: ``secret_storage_options`` (a JSON
    object of credentials and settings for the object store), and optionally ``namespace_impl``
    ("dir" by default, "rest", or a ``lance_namespace`` implementation's class path) with
    ``secret_namespace_properties``.

    Why the ``secret_`` prefix: Airflow's API and UI redact a connection's extra by key name only,
    and hide a whole sub-object when its key contains a sensitive word ("secret", "token" ...).
    Under ``storage_options`` a key such as ``azure_storage_account_key`` would come back in clear
    from ``GET /api/v2/connections``; under ``secret_storage_options`` every value is masked, and
    the UI's edit form round-trips the masked values.  The older names ``storage_options`` and
    ``namespace_properties`` still work (merged with the new ones), with a warning, unless the
    deployment lists them in ``[core] sensitive_var_conn_names``.

    Option values are also registered as secrets, so they are masked in task logs, and they are
    never returned in XCom.
    """

    conn_name_attr = "lance_conn_id"
    default_conn_name = "lance_default"
    conn_type = "lance"
    hook_name = "Lance"

    def __init__(self, lance_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.lance_conn_id = lance_conn_id
        self.legacy_extras: list[str] = []  # extras read under an older name, which the API shows in clear

    @cached_property
    def database(self) -> Connection:
        """The core database connection (opened once per hook)."""
        import geneva_provider as gp

        conn = airflow_connection(self.lance_conn_id, "lance_conn_id", "type 'lance', host = the database URI")
        extra = conn.extra_dejson or {}
        uri = extra.get("uri") or conn.host
        if not uri:
            raise InvalidArgumentError(f"connection '{self.lance_conn_id}' has no database URI: set its host "
                                       "(or extra 'uri') to a directory or object-store prefix")
        options = self._secret_map(extra, STORAGE_OPTIONS)
        properties = self._secret_map(extra, NAMESPACE_PROPERTIES)
        _mask(options)
        _mask(properties)
        return gp.connect(uri, storage_options=options, namespace_impl=extra.get("namespace_impl") or "dir",
                          namespace_properties=properties)

    def _secret_map(self, extra: dict[str, Any], key: str) -> dict[str, str] | None:
        """The string map under ``key``, merged with the one under its older, unmasked name.

        The older name is warned about once per connection and process (the triggerer builds a
        hook at every poll), and a key set under both names is refused rather than guessed.
        """
        legacy = LEGACY_NAMES[key]
        masked = _string_map(extra.get(key), key, self.lance_conn_id)
        clear = _string_map(extra.get(legacy), legacy, self.lance_conn_id)
        if clear is None:
            return masked
        if not _hidden_by_config(legacy):
            self.legacy_extras.append(legacy)
            if (self.lance_conn_id, legacy) not in _WARNED:
                _WARNED.add((self.lance_conn_id, legacy))
                self.log.warning(
                    "Connection '%s': extra '%s' is shown in clear by the Airflow API and UI "
                    "(GET /api/v2/connections); rename it to '%s', whose values Airflow masks", self.lance_conn_id,
                    legacy, key)
        both = sorted(set(clear) & set(masked or {}))
        if both:  # names only: the values may be secrets
            raise InvalidArgumentError(f"connection '{self.lance_conn_id}': {both} set in both extra '{key}' "
                                       f"and extra '{legacy}'; keep them in '{key}' only")
        return {**clear, **(masked or {})}

    def get_conn(self) -> Connection:
        return self.database

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self.database.storage_options

    def open_table(self, name: str) -> Table:
        return self.database.open_table(name)

    def catalog_for(self, table_id: Sequence[str]) -> Catalog:
        """The tables ``table_id`` -- a request's ``id``: namespace path + table name -- is among: the database's
        for a name alone, a child namespace's for a longer id (``["team_a", "docs"]``), as a ``GenevaNamespace``
        finds them (:meth:`~geneva_provider.core.catalog.Catalog.of_table`)."""
        return self.database.catalog.of_table(table_id)

    def dataset(self, table: str) -> Any:
        """The latest version of ``table`` as a ``lance.LanceDataset``."""
        return self.open_table(table).dataset()

    def look(self, table: str, probe: Probe) -> tuple[bool, TableSeen]:
        """One blocking look at ``table`` through ``probe`` (:mod:`geneva_provider.pipeline.table_probes`).

        Whether the probe's condition holds, and what was seen.  A table that does not exist is not
        an error but a condition not met yet (an upstream DAG may create it): seen as ``exists=False``.
        """
        from geneva_provider.core.errors import TableNotFoundError
        from geneva_provider.core.table_events import TableSeen

        try:
            ds = self.dataset(table)
        except TableNotFoundError:
            return False, TableSeen(table=table, exists=False)
        done, seen = probe.check(ds, table)
        return done, TableSeen(table=table, **seen.model_dump(exclude_unset=True, exclude={"table"}))

    def test_connection(self) -> tuple[bool, str]:
        """Succeeds only for a database that exists and can be listed (a missing directory fails)."""
        import os

        try:
            db = self.database
            uri = db.uri
            local = uri[len("file://"):] if uri.startswith("file://") else None if "://" in uri else uri
            if local is not None and not os.path.isdir(local):
                return False, f"database directory {local} does not exist"
            if local is not None and not os.access(local, os.R_OK | os.X_OK):
                return False, f"database directory {local} is not readable"
            names = db.table_names()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, f"{type(exc).__name__}: {exc}"
        renames = ", ".join(f"'{old}' to '{new}'" for new, old in LEGACY_NAMES.items() if old in self.legacy_extras)
        note = f" (rename extra {renames}: the API and UI show its values in clear)" if renames else ""
        return True, f"{len(names)} tables in {uri}{note}"


STORAGE_OPTIONS = "secret_storage_options"
NAMESPACE_PROPERTIES = "secret_namespace_properties"
# The masked extra -> its older name, still read.  Airflow's redactor hides every value below a
# key whose name contains "secret"; it hides nothing below "storage_options".
LEGACY_NAMES = {STORAGE_OPTIONS: "storage_options", NAMESPACE_PROPERTIES: "namespace_properties"}
_WARNED: set[tuple[str, str]] = set()


def _hidden_by_config(key: str) -> bool:
    """Whether the deployment's ``[core] sensitive_var_conn_names`` already hides ``key`` in the API.

    The same test as Airflow's ``should_hide_value_for_key``: a listed word within the key.
    """
    from airflow.sdk import conf

    if not conf.getboolean("core", "hide_sensitive_var_conn_fields", fallback=True):
        return False
    normalized = re.sub(r"\W+", "_", key.strip().lower())
    words = [w.strip() for w in conf.get("core", "sensitive_var_conn_names", fallback="").split(",")]
    return any(w and w in normalized for w in words)


def _string_map(raw: Any, key: str, conn_id: str) -> dict[str, str] | None:
    if raw in (None, "", {}):
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:  # the message quotes no part of the value: it may hold secrets
            raise InvalidArgumentError(f"connection '{conn_id}': extra '{key}' is not a JSON object") from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"connection '{conn_id}': extra '{key}' must be a JSON object, "
                                   f"not a JSON {type(raw).__name__}")
    return {str(k): str(v) for k, v in raw.items()}


def _mask(options: dict[str, str] | None) -> None:
    from airflow.sdk.log import mask_secret

    for value in (options or {}).values():
        if len(value) >= 4:  # masking tiny values ("1", "true") would garble every log line
            mask_secret(value)
