"""The reference's ``geneva.db`` module path: ``from geneva_provider.db import Connection, connect``, and its helper
``dataset_uses_stable_row_ids``."""

from typing import Any

from geneva_provider.facade.connection import Connection, connect

__all__ = ["Connection", "connect", "dataset_uses_stable_row_ids"]


def dataset_uses_stable_row_ids(dataset: Any) -> bool:
    """Whether a Lance dataset (or a table of this package) keeps stable row ids: a row keeps its id through
    updates and compaction, which incremental view refreshes and the table watcher's update counts rely on.

    Tables made by ``create_table`` have them unless ``stable_row_ids=False`` was given.
    """
    to_lance = getattr(dataset, "to_lance", None)
    return bool((to_lance() if callable(to_lance) else dataset).has_stable_row_ids)
