"""The package's exception types (imported by every layer, they import nothing), and their registry.

Every error names the table, column or argument at fault so that a failed DAG task
says what to fix without a trip through the Spark logs.

A stage runs in another process (a spark-submit driver, the triggerer), so its error travels as
data: an ``ErrorPayload`` (:mod:`geneva_provider.core.contracts.error_payload`) holds the error's ``code``
(its class's, stable), its message and whether a retry can help.  The code is looked up in a
registry every package error class joins when it is defined -- never as an attribute name of this
module -- and ``retryable`` is a class attribute only: an error that a retry can fix is a class of
its own (``SparkServerUnreachableError``), so a class name says everything a payload carries.
This module imports nothing, so that a Spark worker can always load it to say what else it lacks.
"""

from __future__ import annotations

from typing import Any, ClassVar

_REGISTRY: dict[str, type[GenevaError]] = {}


class GenevaError(Exception):
    """Base class of every error raised by geneva_provider.

    ``retryable`` says whether running the same task again can help: bad input, a failing UDF or a
    missing value fail the same way every time (Airflow fails such a task without retrying it).
    ``code`` names the class in an :class:`ErrorPayload` (its class name unless it sets one);
    ``register=False`` leaves a subclass out of the registry (an Airflow twin of a class that is in it).
    """

    code: ClassVar[str] = "GenevaError"
    retryable: ClassVar[bool] = False

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not register:
            return
        cls.code = cls.__dict__.get("code", cls.__name__)
        known = _REGISTRY.get(cls.code)
        same = known is not None and (known.__module__, known.__qualname__) == (cls.__module__, cls.__qualname__)
        if known is not None and not same:  # a reloaded module redefines its own classes
            raise TypeError(f"error code {cls.code!r} is taken by {known.__module__}.{known.__qualname__}")
        _REGISTRY[cls.code] = cls


_REGISTRY[GenevaError.code] = GenevaError


def error_class(code: str) -> type[GenevaError] | None:
    """The package error class registered under ``code`` (None for another exception's name)."""
    return _REGISTRY.get(code)


def error_classes() -> list[type[GenevaError]]:
    """Every registered package error class."""
    return list(_REGISTRY.values())


class InvalidArgumentError(GenevaError, ValueError):
    """A caller passed a value that cannot work (bad size, bad filter, unknown column...)."""


class TableNotFoundError(GenevaError, LookupError):
    """The named table does not exist in the database."""


class TableExistsError(InvalidArgumentError):
    """``create_table(mode="create")`` named a table that exists already (an InvalidArgumentError, as it was)."""


class ColumnError(GenevaError, ValueError):
    """A column is unknown, already exists, or is not a UDF column."""


class UDFDefinitionError(GenevaError, TypeError):
    """A UDF cannot be used as declared (no data type, bad signature...)."""


class UDFImportError(UDFDefinitionError, ImportError):
    """A UDF reference that cannot be imported: a UDFDefinitionError, and an ImportError as it always was."""


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
    a :class:`SparkServerUnreachableError`, which a retry can fix.
    """


class SparkServerUnreachableError(SparkEnvironmentError):
    """The Spark Connect server cannot be reached (refused, down, lost mid-stage): it may be restarting.

    Retryable: Airflow's retry reconnects and resumes from the checkpoints.
    """

    retryable = True


class StageRunnerLostError(SparkEnvironmentError):
    """The process that ran a Spark stage on its own (a deferrable or durable stage) died before the stage ended.

    Retryable: the next try starts the stage again, and it resumes from the batch checkpoints.
    """

    retryable = True


class ResourceUnavailableError(SparkEnvironmentError):
    """A UDF asks for resources (GPUs, cores, memory per task) that the Spark session cannot give.

    Raised before any Spark job, naming the UDF, what it asked, what the session offers and what
    to change; nothing is written.  Not retryable: the same session refuses the same ask again.
    """


class PlanFormatError(InvalidArgumentError):
    """A stored plan was written by another version of the package (plan format N, expected M)."""


class CheckpointMissingError(GenevaError):
    """A stage needs checkpoints that an earlier stage should have written."""


class TableVersionGoneError(GenevaError, LookupError):
    """A table version a plan reads is gone: its versions were cleaned up between the plan and a later stage.

    Not retryable: every stage of the same plan opens the same version; a new plan reads the current one
    (and reuses what the batch checkpoints hold).
    """


class CommitError(GenevaError):
    """A commit could not be applied (non-retryable conflict or retries exhausted)."""

    retryable = True  # a later attempt meets other concurrent writers


class ConcurrentOverwriteError(CommitError):
    """A concurrent job of the same column committed newer values over fragments this plan meant to commit.

    Not retryable: every retry of the same plan meets the same newer values; only a new plan takes them in.
    """

    retryable = False


class ColumnReplacedError(CommitError):
    """A column a job writes into was dropped and re-created (another incarnation) since the job was planned.

    Nothing of the job was committed into the new column.  Not retryable: every retry of the same plan
    meets the same new column; a new plan (a rerun of the job) computes the new column's values.
    """

    retryable = False


class VerificationError(GenevaError):
    """Planned rows did not end up committed in the table."""


class MalformedEventError(GenevaError):
    """A trigger event that none of the package's triggers could have sent (a bug, or another version's event)."""


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


class StorageAccessError(GenevaError, PermissionError):
    """A table's storage cannot be used with the credentials at hand: none were found, or the store refused them.

    Not retryable: the same storage options fail the same way; the message names the store and what to set
    (never the options' values).
    """
