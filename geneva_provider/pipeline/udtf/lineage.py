"""Which source table, and which refresh, a UDTF view's rows belong to.

A view's metadata names its source by name and version, which is not enough: a table dropped and
created again under the same name starts its versions over, so "version 5" may be another table's
commit.  The view therefore also keeps the uuid of the commit that made the version it holds (Lance
writes one per transaction) and compares it with the source's own history.  And a refresh killed after
committing rows but before writing its metadata leaves rows the metadata does not account for: the
metadata records the view's version just before it was written, so rows created after it are known to
come from an unfinished refresh.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.models import UdtfWork
from geneva_provider.core.refs import TableRef
from geneva_provider.core.views.udtf_meta import META_UDTF_VIEW_VERSION, UdtfViewState, refreshed_metadata
from geneva_provider.pipeline.schema_changes import UpdateColumns

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

log = logging.getLogger(__name__)


def transaction_of(ds: Dataset, version: int | None = None) -> str | None:
    """The uuid of the commit that made ``version`` (default: the dataset's own); None when Lance kept none."""
    try:
        txn = ds.read_transaction(ds.version if version is None else version)
    except (ValueError, OSError):  # that version was cleaned up (or never existed)
        return None
    return None if txn is None else str(txn.uuid)


def recreated_since(source: TableRef, state: UdtfViewState, view: str) -> str | None:
    """Why the source table is no longer the one the view was refreshed from, or None when it is (or when
    nothing can tell: the held version cleaned up while the table went on)."""
    if not state.refreshed or not state.source_transaction:
        return None
    latest = source.dataset()
    name, held = source.name, state.base_version
    if latest.version < held:
        return (f"view '{view}' holds version {held} of table '{name}', but '{name}' is now at version "
                f"{latest.version}: it was dropped and created again")
    now = transaction_of(latest, held)
    if now is not None and now != state.source_transaction:
        return (f"view '{view}' holds version {held} of table '{name}' (commit {state.source_transaction}), but "
                f"version {held} of '{name}' is now commit {now}: it was dropped and created again")
    return None


def unfinished_refresh(view: Dataset, state: UdtfViewState) -> bool:
    """True when the view holds rows that no finished refresh accounts for (one was killed after committing).

    A view refreshed before its metadata recorded its version is treated the same way (safe: such a
    view is rebuilt against its source once, with no UDTF call for parents whose rows are current).
    """
    if not state.refreshed:
        return False
    if state.view_version is None or state.view_version < 0:  # never recorded, or a check found rows to repair
        return True
    rows = view.to_table(columns=[], with_row_id=True, filter=f"_row_created_at_version > {state.view_version}",
                         limit=1)
    return rows.num_rows > 0


def mark_refreshed(view: Dataset, work: UdtfWork, pending: list[int]) -> None:
    """Writes that the view now holds ``work``'s source version: a finished refresh (its generation + 1)."""
    _set_metadata(view, refreshed_metadata(
        work.source_version, pending, work.partition_state, generation=work.generation + 1,
        source_transaction=work.source_transaction, view_version=view.version))


def mark_for_rebuild(view: Dataset) -> None:
    """Makes the next refresh compare the view with its whole source (a check found rows it must not hold)."""
    _set_metadata(view, {META_UDTF_VIEW_VERSION: "-1"})


def _set_metadata(view: Dataset, values: Mapping[str, str | None]) -> None:
    """A change of the view's metadata, committed through the committer (the view named by its directory)."""
    name = view.uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".lance")
    UpdateColumns(TableRef(name, view.uri, view.initial_storage_options)).set_table_metadata(values).commit()
