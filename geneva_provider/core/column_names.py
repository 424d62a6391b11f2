"""Which names a user column may have (core): Lance's reserved names and the package's own columns.

Checked wherever a user names a column -- a new table, an appended batch, a UDF column, a view's
select -- so a table never holds a name Lance refuses to read or one that forges the package's
bookkeeping.  :func:`user_columns` is the one definition of what an error lists as a table's columns.
"""

from __future__ import annotations

from typing import Any

from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.fingerprints import FINGERPRINT_PREFIX
from geneva_provider.core.views.meta import IS_SET, SOURCE_ROW_ID
from geneva_provider.core.views.udtf_meta import CHUNK_INDEX, PARTITION, PARTITION_FP, SOURCE_FP

# Lance's own columns (a table cannot hold them; a view reading them cannot be read) and its search outputs.
_RESERVED = ("_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version",
             "_distance", "_score")
# A view's bookkeeping: the source row a row comes from, a chunker's place and parent fingerprint, a batch
# UDTF's partition key hash and fingerprint.
_BOOKKEEPING = (SOURCE_ROW_ID, IS_SET, CHUNK_INDEX, SOURCE_FP, PARTITION, PARTITION_FP)


def is_internal_column(name: str) -> bool:
    """A column the package writes itself: fingerprints (any ``__geneva_fp`` name) and a view's bookkeeping."""
    return name.startswith(FINGERPRINT_PREFIX) or name in _BOOKKEEPING


def user_columns(names: Any) -> list[str]:
    """The user's columns among ``names``, in table order: what an error lists when a column is not found.

    Neither the package's own columns nor Lance's (``_rowid``, ``_rowaddr``, ...) are listed: a user never
    made them, and naming them in an error suggests they are data.
    """
    return [n for n in names if not is_internal_column(n) and n not in _RESERVED]


def check_column_name(column: Any, subject: str) -> None:
    """A user column's name: a non-empty string without '.', not one Lance or the package reserves.

    ``subject`` says who is naming it ("add_columns on table 'events'"); the error names both.
    """
    if not isinstance(column, str) or not column.strip():
        raise InvalidArgumentError(f"{subject}: column names must be non-empty strings, got {column!r}")
    why = ("Lance reserves it" if column in _RESERVED else
           f"the package reserves {FINGERPRINT_PREFIX}... and {', '.join(_BOOKKEEPING)}" if is_internal_column(column)
           else "Lance does not allow '.' in a column name" if "." in column else None)
    if why is not None:
        raise InvalidArgumentError(f"{subject}: column name {column!r} is reserved or not allowed: {why}")
