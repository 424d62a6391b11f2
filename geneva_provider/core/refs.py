"""A table reference: what every stage needs to open a Lance table, and nothing more.

Stages take a :class:`TableRef` (name, URI, storage options) rather than the ``Table``
facade, so they run the same in a notebook, an Airflow worker and a Spark executor.
Storage options may hold secrets: they are never part of the repr or of a stored plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.storage_errors import reaching

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.store.checkpoint import LanceCheckpointStore

CHECKPOINT_DIR = "_checkpoints"


def check_table_ref(table: Any, argument: str, job: str) -> TableRef:
    """``table`` if it is a TableRef; else InvalidArgumentError saying how to get one (stages take no names)."""
    if not isinstance(table, TableRef):
        raise InvalidArgumentError(f"{job}: {argument} must be a TableRef -- tbl.ref, for tbl = "
                                   f"db.open_table(name) -- got {table!r}")
    return table


@dataclass(frozen=True)
class TableRef:
    """One Lance table: its name in the database, its URI, and the options to reach it."""

    name: str
    uri: str
    storage_options: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def dataset(self, version: int | None = None) -> Dataset:
        """The table's ``lance.LanceDataset`` (latest, or at ``version``)."""
        import lance

        if version is None:
            with reaching(f"table '{self.name}'", self.storage_options):
                return lance.dataset(self.uri, storage_options=self.storage_options)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidArgumentError(f"table '{self.name}': a version is a positive integer, got {version!r}")
        with reaching(f"table '{self.name}'", self.storage_options):
            try:
                return lance.dataset(self.uri, version=version, storage_options=self.storage_options)
            except (ValueError, OSError) as exc:
                if "not found" not in str(exc).lower() and "does not exist" not in str(exc).lower():
                    raise
                raise InvalidArgumentError(f"table '{self.name}' has no version {version} (it may have been "
                                           "cleaned up)") from None

    @property
    def checkpoint_uri(self) -> str:
        """The default checkpoint store: ``<table>.lance/_checkpoints``."""
        return f"{self.uri.rstrip('/')}/{CHECKPOINT_DIR}"

    def checkpoint_store(self) -> LanceCheckpointStore:
        """The table's default checkpoint store."""
        from geneva_provider.core.store.checkpoint import LanceCheckpointStore

        return LanceCheckpointStore(self.checkpoint_uri, self.storage_options)
