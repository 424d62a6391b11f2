"""The package's exception types (core: imported by every layer, imports nothing).

Every error names the table, column or argument at fault so that a failed DAG task
says what to fix without a trip through the Spark logs.
"""

from __future__ import annotations


class GenevaError(Exception):
    """Base class of every error raised by geneva_provider.

    ``retryable`` says whether running the same task again can help: bad input, a failing UDF or a
    missing value fail the same way every time (Airflow fails such a task without retrying it).
    """

    retryable: bool = False


class InvalidArgumentError(GenevaError, ValueError):
    """A caller passed a value that cannot work (bad size, bad filter, unknown column...)."""


class TableNotFoundError(GenevaError, LookupError):
    """The named table does not exist in the database."""


class ColumnError(GenevaError, ValueError):
    """A column is unknown, already exists, or is not a UDF column."""


class UDFDefinitionError(GenevaError, TypeError):
    """A UDF cannot be used as declared (no data type, bad signature...)."""


class UDFExecutionError(GenevaError):
    """A UDF raised or returned something unusable while computing a column."""


class UDFWorkerDiedError(UDFExecutionError):
    """A UDF's Python worker died while computing a column (os._exit, a native crash, a kill for memory).

    Retryable: from outside, a worker the UDF crashed cannot be told from one the operating system or
    a lost executor took down, and a retry resumes from the batch checkpoints (within one attempt, a
    worker that dies twice on the same rows is reported rather than run a third time).
    """

    retryable = True


class SparkEnvironmentError(GenevaError):
    """The Spark cluster cannot run the stages as configured (versions, missing packages, unreachable server).

    Mismatched versions or packages fail the same way on every attempt; an unreachable server is
    marked ``retryable`` (it may be restarting).
    """


class PlanFormatError(InvalidArgumentError):
    """A stored plan was written by another version of the package (plan format N, expected M)."""


class CheckpointMissingError(GenevaError):
    """A stage needs checkpoints that an earlier stage should have written."""


class CommitError(GenevaError):
    """A commit could not be applied (non-retryable conflict or retries exhausted)."""

    retryable = True  # a later attempt meets other concurrent writers


class VerificationError(GenevaError):
    """Planned rows did not end up committed in the table."""


class JobNotFoundError(GenevaError, LookupError):
    """No job record with that id in the database."""


class JobCancelledError(GenevaError):
    """The job was cancelled through its handle; nothing of it was left half-committed."""


class CorruptCheckpointError(GenevaError, OSError):
    """A stored checkpoint is truncated or unreadable: it is removed and its rows are computed again."""


class StorageUnreachableError(GenevaError, ConnectionError):
    """A table's storage could not be reached: the connection was refused, the host is unknown or down.

    Not a throttled request (Lance's namespace reports both as throttling); ``retryable``: the
    store may be restarting, or the network back.
    """

    retryable = True
