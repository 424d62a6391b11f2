"""What a poll of a table saw, and the events the table triggers send to their sensors (core: plain data).

A trigger runs in the triggerer and its event reaches the sensor as a plain dict (Airflow stores it
between the two); :func:`parse_event` validates it on arrival into one of three typed events, so a
sensor never reads an event by string keys, and a malformed one fails with a clear error instead
of a ``KeyError`` far from its cause.  Each model dumps to the same dict the triggers have always
sent (fields never set are left out).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from geneva_provider.core.contracts.error_payload import ErrorPayload
from geneva_provider.core.contracts.kinds import EventStatus
from geneva_provider.core.errors import MalformedEventError
from geneva_provider.core.wording import noun


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """The plain dict a trigger event or an XCom carries: only the fields that were set (and an event's status)."""
        data = self.model_dump(mode="json", exclude_unset=True)
        status = getattr(self, "status", None)
        return data if status is None else {"status": status.value, **data}


class TableSeen(_Event):
    """What one poll of a table saw: its status and, for a column, how many rows still lack it.

    ``exists`` is set (False) only when the table was not found; then nothing else but ``table`` is.
    """

    table: str | None = None
    exists: bool | None = None
    version: int | None = None
    rows: int | None = None
    fragments: int | None = None
    column: str | None = None
    rows_pending: int | None = None
    fragments_pending: int | None = None

    def describe(self) -> str:
        """What the poll saw, in a few words (for the logs and a timeout's message)."""
        if self.exists is False:
            return f"table '{self.table}' does not exist (yet)"
        parts = [f"version {self.version}"]
        if self.rows is not None:
            parts.append(f"{self.rows} {noun(self.rows, 'row')} in {self.fragments} {noun(self.fragments, 'fragment')}")
        if self.column is not None:
            parts.append(f"{self.rows_pending} {noun(self.rows_pending, 'row')} in {self.fragments_pending} "
                         f"{noun(self.fragments_pending, 'fragment')} never computed in column '{self.column}'")
        return f"table '{self.table}' at " + ", ".join(parts)


class SuccessEvent(TableSeen):
    """The condition holds: what the last poll saw (the sensor's XCom)."""

    status: Literal[EventStatus.SUCCESS] = EventStatus.SUCCESS

    def seen(self) -> dict[str, Any]:
        """What was seen, without the status: what the sensor returns."""
        return {k: v for k, v in self.to_dict().items() if k != "status"}


class TimeoutEvent(_Event):
    """The deadline passed before the condition held."""

    status: Literal[EventStatus.TIMEOUT] = EventStatus.TIMEOUT
    table: str | None = None
    message: str


class ErrorEvent(_Event):
    """Polling cannot go on: the error, as an :class:`ErrorPayload` spread over the event's fields.

    ``error`` is the payload's code (left out by hand-made events: then not a package error).
    """

    status: Literal[EventStatus.ERROR] = EventStatus.ERROR
    table: str | None = None
    message: str
    error: str | None = None
    retryable: bool = True

    @classmethod
    def of(cls, table: str, exc: BaseException) -> ErrorEvent:
        payload = ErrorPayload.from_exc(exc)
        return cls(table=table, message=payload.message, error=payload.code, retryable=payload.retryable)

    @property
    def payload(self) -> ErrorPayload:
        return ErrorPayload(code=self.error or "Exception", message=self.message, retryable=self.retryable)


TableEvent = Annotated[SuccessEvent | TimeoutEvent | ErrorEvent, Field(discriminator="status")]
_EVENTS: TypeAdapter[SuccessEvent | TimeoutEvent | ErrorEvent] = TypeAdapter(TableEvent)


def parse_event(event: Any, sensor: str) -> SuccessEvent | TimeoutEvent | ErrorEvent:
    """``event`` as its typed model, or :class:`MalformedEventError` naming the sensor and what is wrong."""
    try:
        return _EVENTS.validate_python(event)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'event'}: {e['msg']}" for e in exc.errors())
        raise MalformedEventError(f"{sensor} received a malformed trigger event {event!r:.300}: {problems}") from None



class TableChanged(_Event):
    """What an ``AssetWatcher``'s trigger reports: the table moved from ``from_version`` to ``to_version`` through
    commits that matter (an asset event's extra).

    ``operations`` names those commits' Lance operations, oldest first (``Append``, ``Delete``, ``Update`` ...);
    the package's own commits in between are counted in ``own_commits`` and left out of everything else.
    ``rows_added`` is exact (the appended fragments' rows); ``rows_deleted`` and ``rows_updated`` are what
    Lance's change feed says (``ds.delta``), which needs stable row ids: None on a table without them, and
    None too when a commit's transaction or the version before it is gone (``cleanup_old_versions``).  A
    commit whose transaction Lance no longer has is named ``Unknown``: its rows cannot be counted, so all
    three counts are None (not known) rather than a count that leaves its rows out.

    ``created``: the table appeared, or was dropped and re-created (a new incarnation, see
    :mod:`geneva_provider.core.table_watch`): ``from_version`` is 0, ``rows_added`` every row it holds, and
    ``operations`` the commits of its history (own ones left out).
    """

    table: str
    from_version: int
    to_version: int
    operations: list[str]
    own_commits: int = 0
    rows_added: int | None = 0
    rows_deleted: int | None = None
    rows_updated: int | None = None
    created: bool = False

    def describe(self) -> str:
        counts = ", ".join(f"{k.removeprefix('rows_')} {v}" for k, v in
                           (("rows_added", self.rows_added), ("rows_deleted", self.rows_deleted),
                            ("rows_updated", self.rows_updated)) if v)
        if self.created:
            return (f"table '{self.table}' appeared (or was re-created) at v{self.to_version} with "
                    f"{self.rows_added} rows: {', '.join(self.operations) or 'its own commits only'}")
        return (f"table '{self.table}' v{self.from_version} -> v{self.to_version}: {', '.join(self.operations)}"
                + (f" ({counts})" if counts else ""))
