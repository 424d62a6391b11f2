"""Ctrl-C (SIGINT) during a foreground backfill on the in-process task runner: the job cancels itself, records that
it was cancelled, and the call ends with a one-line KeyboardInterrupt (the Spark case: tests/system/test_interrupt.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import geneva_provider as gp
from geneva_provider.stages import InProcessRunner
from tests.helpers import counting_double, events_table, read_calls


def test_ctrl_c_cancels_the_foreground_job_and_records_it_and_puts_the_handler_back(db, call_dir):
    tbl = db.create_table("events", events_table(2_000))
    tbl.add_columns({"y": counting_double(call_dir, sleep=0.01)})  # 20 s of work: interrupted long before
    late: list[int] = []

    def callers_handler(signum: int, frame: object) -> None:  # the caller's own; a late signal would land here
        late.append(signum)

    previous = signal.signal(signal.SIGINT, callers_handler)
    sent = threading.Event()

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 60
        while len(read_calls(call_dir)) < 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    try:
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        with pytest.raises(KeyboardInterrupt) as stopped:
            tbl.backfill("y", spark=InProcessRunner(), checkpoint_size=50, task_size=50)
        assert sent.is_set() and not late
        assert signal.getsignal(signal.SIGINT) is callers_handler  # put back once the job ended
    finally:
        signal.signal(signal.SIGINT, previous)

    message = str(stopped.value)
    record = db.list_jobs("events")[0]
    assert message == (f"events.y: interrupted; job {record.job_id} was cancelled and committed nothing more "
                       "(running it again resumes from its checkpoints)")
    assert stopped.value.__cause__ is None and stopped.value.__suppress_context__
    assert str(record.status) in ("FAILED", "CANCELLED") and "cancel" in f"{record.status} {record.error}".lower()
    assert record.rows_committed == 0 and tbl.to_arrow(["y"]).column("y").null_count == 2_000
    assert len(read_calls(call_dir)) < 2_000
    tbl.dataset().validate()
    with pytest.raises(gp.InvalidArgumentError, match="not running: nothing to cancel"):
        db.cancel_job(record.job_id)  # it ended
