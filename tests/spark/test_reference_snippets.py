"""The reference's (LanceDB Geneva's) snippets that need a real Spark, run after the import swap only.

``@udf(num_cpus=4, memory="4g")`` on a notebook's local session, and ``@chunker(manifest=...)`` shipping the
user's code to a refresh's workers.  The rest of the reference's snippets that used to stop here are in
``tests/unit/test_reference_snippets.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pytest

import geneva_provider as geneva

ROWS = 60


def _logged_most_at_once(caplog) -> list[int]:
    """The "at most N tasks ran at once" figures the apply stage logged (from the partitions' own times)."""
    return [int(n) for n in re.findall(r"resource profile [^:]*: at most (\d+) tasks ran at once", caplog.text)]


def _spans(log_dir: Path) -> list[tuple[float, float]]:
    return [tuple(json.loads(line)) for p in log_dir.iterdir() for line in p.read_text().split("\n") if line]


def test_cpus_and_memory_asked_on_a_local_master_run_with_a_warning_fewer_tasks_at_once(db, spark, tmp_path,
                                                                                         caplog):
    """The reference's ``@udf(num_cpus=4, memory="4g")`` on a notebook's ``local[2]`` session: Spark runs no task
    resource profile there, so instead of refusing, the package runs the UDF's tasks one at a time (2 cores
    hold no 4-core task twice) and says so."""
    caplog.set_level("INFO", logger="geneva_provider")
    log_dir = tmp_path / "calls"
    log_dir.mkdir()

    @geneva.udf(data_type=pa.int64(), num_cpus=4, memory="4g")
    def heavy(x: int) -> int:
        start = time.time()
        time.sleep(0.02)
        with open(log_dir / f"{os.getpid()}.log", "a") as f:
            f.write(json.dumps([start, time.time()]) + "\n")
        return x * 3

    tbl = db.create_table("heavy", [{"x": i} for i in range(ROWS)], max_rows_per_file=10)
    tbl.add_columns({"y": heavy})
    with pytest.warns(UserWarning, match=r"UDF 'heavy' \(column 'y'\) asks for num_cpus=4, memory=4g per task; the "
                                         r"session's master is 'local\[2\]'.*at most 1 at once"):
        result = tbl.backfill("y", spark=spark, task_size=10, checkpoint_size=5, progress=False)
    assert result.rows_computed == ROWS
    t = tbl.to_arrow(["x", "y"])
    assert sorted(zip(t.column("x").to_pylist(), t.column("y").to_pylist(), strict=True)) == [
        (x, 3 * x) for x in range(ROWS)]
    tbl.to_lance().validate()
    assert _logged_most_at_once(caplog) == [1]  # 6 tasks, never two at once
    spans = sorted(_spans(log_dir))
    assert len(spans) == ROWS and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))

    # One core each: both of the session's cores run tasks, and nothing is warned about memory it has.
    @geneva.udf(data_type=pa.int64(), num_cpus=1, memory="64m")
    def light(x: int) -> int:
        return x + 1

    tbl.add_columns({"z": light})
    with pytest.warns(UserWarning, match=r"at most 2 at once; a cluster master"):
        tbl.backfill("z", spark=spark, task_size=10, progress=False)
    assert tbl.count_rows("z = x + 1") == ROWS


class Word(NamedTuple):
    word: str
    scaled: int


def test_a_chunker_declared_with_a_manifest_ships_it_to_every_refresh_of_its_view(db, connect_server, shipped):
    """``@chunker(manifest=...)``, the reference's: the manifest travels with the view's chunker, so a refresh
    given only a session still finds the driver-only package on the workers, and a pip requirement they lack
    is named before any work."""
    from geneva_provider import chunker
    from geneva_provider.manifest import GenevaManifest

    name, mod = shipped
    deps = GenevaManifest.create_pip("chunk-deps").pip(["pyarrow>=1"]).py_modules([name]).build()

    @chunker(manifest=deps)
    def words(text: str) -> Iterator[Word]:
        for w in text.split():
            yield Word(w, mod.scale(len(w)))

    docs = db.create_table("docs", [{"id": i, "text": "a " * (i % 3) + "bcd"} for i in range(12)],
                           max_rows_per_file=4)
    view = db.create_udtf_view("doc_words", docs.search(None).select(["id", "text"]), udtf=words)
    with db.context(cluster=connect_server.url) as spark:  # a bare session: the context ships nothing
        db.refresh("doc_words", spark=spark, progress=False)
    rows = view.to_arrow(["id", "word", "scaled"]).to_pylist()
    expected = [{"id": i, "word": w, "scaled": 7 * len(w) + 1}
                for i in range(12) for w in ("a " * (i % 3) + "bcd").split()]
    assert sorted(rows, key=lambda r: (r["id"], r["word"])) == sorted(expected, key=lambda r: (r["id"], r["word"]))

    lacking = GenevaManifest.create_pip("missing").pip(["geneva-no-such-package-7c1d"]).py_modules([name]).build()

    @chunker(manifest=lacking)
    def words2(text: str) -> Iterator[Word]:
        for w in text.split():
            yield Word(w, mod.scale(len(w)))

    other = db.create_udtf_view("doc_words2", docs.search(None).select(["id", "text"]), udtf=words2)
    version = other.version
    with db.context(cluster=connect_server.url) as spark:
        with pytest.raises(geneva.SparkEnvironmentError, match=r"geneva-no-such-package-7c1d \(not installed\)"):
            db.refresh("doc_words2", spark=spark, progress=False)
    assert other.version == version and other.count_rows() == 0


def test_an_embedding_udf_of_float64_values_fills_a_float32_vector_column_on_spark(db, spark):
    """The reference's embedding UDF (a model's float64 output) for a ``pa.list_(pa.float32(), N)`` column, on the
    Spark executors' Python workers; a value float32 cannot hold fails naming the UDF, the column and the value."""
    import numpy as np

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    def embed(text: pa.Array) -> pa.Array:
        return np.array([[len(t), 0.25, 1 / 3] for t in text.to_pylist()], dtype=np.float64)

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    def blows_up(text: str) -> list[float]:
        return [np.float64(1e300 if text == "aa" else 1.0), 0.0, 0.0]

    tbl = db.create_table("docs", [{"text": "a" * (i % 5 + 1)} for i in range(40)], max_rows_per_file=10)
    tbl.add_columns({"e": embed, "f": blows_up})
    tbl.backfill("e", spark=spark, progress=False)
    third = float(np.float32(1 / 3))
    t = tbl.to_arrow(["text", "e"]).to_pylist()
    assert [r["e"] for r in t] == [[float(len(r["text"])), 0.25, third] for r in t]
    version = tbl.version
    with pytest.raises(geneva.UDFExecutionError) as caught:
        tbl.backfill("f", spark=spark, progress=False)
    assert all(s in str(caught.value) for s in ("UDF 'blows_up'", "column 'f'", "1e+300")), str(caught.value)
    assert tbl.version == version and tbl.count_rows("f IS NOT NULL") == 0
    tbl.to_lance().validate()
