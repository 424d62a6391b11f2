"""Progress checked against the truth (issue 44): a UDF that records when it computed each row, and the counts and
ETAs a backfill on a real Spark session showed meanwhile.

* every count shown is at most about a second of work behind the rows the UDF had really computed, and never
  ahead of them;
* after the first 20 % of the rows, every ETA shown is within 50 % of the real time left to compute the rest (in
  the last two seconds, within a second: the count it is computed from may trail by that much).

The counts are those of the job's progress lines (``geneva_provider.progress``, with their times), read as a user
reads them; the UDF's times are written by the Python workers themselves.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import time
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp
from geneva_provider.facade import progress as shown
from tests.helpers import events_table

ROWS = 6_000
SLEEP = 0.004  # seconds a row: ~12 s of work over local[2]'s two Python workers
LAG = 1.0      # seconds of work a count may trail the UDF by
_LINE = re.compile(r"^t\.y: ([\d,]+) of 6,000 rows computed \(([?\d,]+) rows/s(?:, ETA (?:(\d+)m)?([\d.]+)s)?\)")


def _timed_double(times_dir: str) -> gp.UDF:
    @gp.udf(data_type=pa.int64(), name="timed_double")
    def timed_double(x: int) -> int:
        time.sleep(SLEEP)
        with open(os.path.join(times_dir, f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{time.time()}\n")  # the row is computed: its time, before progress can count it
        return 2 * x

    return timed_double


def test_counts_trail_the_udf_by_at_most_a_second_and_the_eta_tells_the_time_left(db, spark, tmp_path, caplog,
                                                                                    monkeypatch):
    times_dir = tmp_path / "times"
    times_dir.mkdir()
    monkeypatch.setattr(shown, "LOG_SECONDS", 0.25)
    monkeypatch.setattr(shown, "display_here", lambda: "log")
    tbl = db.create_table("t", events_table(ROWS), max_rows_per_file=1_500)
    tbl.add_columns({"y": _timed_double(str(times_dir))})
    caplog.set_level(logging.INFO, logger="geneva_provider.progress")
    result = tbl.backfill("y", spark=spark)
    assert result.rows_computed == ROWS
    assert tbl.count_rows("y IS NULL OR y != 2 * x") == 0
    tbl.dataset().validate()

    done = sorted(float(t) for p in Path(times_dir).glob("*.txt") for t in p.read_text().split())
    assert len(done) == ROWS, len(done)  # every row once

    def computed_by(t: float) -> int:
        return bisect.bisect_right(done, t)

    looks = [(r.created, m) for r in caplog.records if r.name == "geneva_provider.progress"
             if (m := _LINE.match(r.getMessage()))]
    during = [(t, int(m[1].replace(",", "")), m) for t, m in looks if done[0] < t < done[-1]]
    assert len(during) >= 20, [m.string for _, m in looks]
    behind = [t - done[count] for t, count, _ in during if count < len(done)]  # since the first row not counted
    print(f"{len(during)} looks; behind the UDF by at most {max(behind):.2f}s, "
          f"on average {sum(behind) / len(behind):.2f}s")
    for t, count, m in during:
        assert count <= computed_by(t), (m.string, computed_by(t))  # never ahead of the UDF
        assert count >= computed_by(t - LAG), (m.string, computed_by(t), computed_by(t - LAG))  # <= 1 s behind
    etas = [(t, 60 * int(m[3] or 0) + float(m[4]), m) for t, count, m in during if m[4] and count >= ROWS // 5]
    assert len(etas) >= 10, [m.string for _, _, m in during]
    for t, eta, m in etas:
        left = done[-1] - t
        # In the last LAG seconds the count's own lag (up to LAG of work) is more than half the time left.
        assert abs(eta - left) <= max(0.5 * left, LAG if left < 2 * LAG else 0), (m.string, f"really {left:.2f}s left")
