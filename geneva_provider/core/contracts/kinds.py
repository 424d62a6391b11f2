"""The closed vocabularies every layer shares: stages, job kinds, row outcomes, event statuses and digest schemes.

They are ``StrEnum``s so that they travel as the very strings the store, XCom, Spark task results and
job records have always held (``JobKind.BACKFILL == "backfill"``): a value read back from JSON compares
equal to its member, and what is written stays the same words.
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """A stage of a job: each is one Airflow task, and each records itself in the job record."""

    PLAN = "plan"
    APPLY = "apply"
    WRITE_COMMIT = "write_commit"
    COMPACT = "compact"
    INDEX = "index"  # an index build's segment tasks and its one commit
    VERIFY = "verify"


class UDTFKind(StrEnum):
    """A chunker (1:N, the view follows its source row by row) or a batch UDTF (N:M, by partition)."""

    CHUNKER = "chunker"
    UDTF = "udtf"


class JobKind(StrEnum):
    """What a job computes: a UDF column of a table, a view's rows, a compaction's rewrites, or an index."""

    BACKFILL = "backfill"
    REFRESH = "refresh"
    COMPACTION = "compaction"
    UDTF = "udtf"  # the refresh of a chunker or batch-UDTF view: rows expanded from source rows
    INDEX = "index"  # an index build or add-only refresh: segments on Spark tasks, one commit


class RowOutcome(StrEnum):
    """What a UDF error policy made of a row whose call failed."""

    SKIPPED = "skipped"      # left NULL, recorded in the error store
    RECOVERED = "recovered"  # a retry computed it
    FAILED = "failed"        # the job fails on it

    @property
    def leaves_row_empty(self) -> bool:
        """Whether the row ends without its value (the error store's "failed rows")."""
        return self is not RowOutcome.RECOVERED


class EventStatus(StrEnum):
    """How a stage report or a trigger event ended."""

    SUCCESS = "success"
    FAILED = "failed"  # a stage report: the stage raised
    ERROR = "error"    # a trigger event: waiting cannot go on
    TIMEOUT = "timeout"  # a trigger event: the deadline passed first


class DigestScheme(StrEnum):
    """How :func:`~geneva_provider.core.fingerprints.digest_fingerprints` hashes each row's message.

    A UDTF view records the scheme of the fingerprints it stores (``geneva::udtf::fingerprints``), so a view
    keeps the one it was created with."""

    # An 8-byte BLAKE2b keyed with the seed: the views created before the scheme was recorded.
    BLAKE2B = "blake2b-64"
    # XXH3's 64-bit hash seeded with the seed's: the views created since.  On documents of ~1,000 characters
    # it takes a fifth of BLAKE2b's CPU (0.02 s against 0.11 s per 100,000 rows here), a sixth of what a
    # chunker view's first refresh spent besides its chunker.  Fingerprints detect changes; they are not
    # meant to resist an adversary (neither was the 8-byte BLAKE2b), so a keyed hash buys nothing.
    XXH3 = "xxh3-64"
