"""The job-kind protocol: every registered kind implements it, plans are told apart by their kind alone, and a
chunker that kills its Python worker is named with its rows and cause, as a UDF is (the shared apply driver).

The part that needs a Spark session; the rest is in tests/unit/test_job_kinds.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa
import pytest

import geneva_provider as gp


class Piece(NamedTuple):
    piece: str
    start: int


def test_a_chunker_that_kills_its_worker_is_named_with_its_rows_and_cause(db, tmp_path, spark):
    """The shared apply driver marks every function call: a chunker's death names the chunker, the view, the
    source fragment and rows, and the cause -- nothing is committed, and a rerun once it is fixed is exact."""
    flag = tmp_path / "die.flag"
    flag.write_text("die")
    path = str(flag)

    @gp.chunker
    def pieces(doc_id: int, text: str) -> Iterator[Piece]:
        if doc_id == 250 and os.path.exists(path):
            os._exit(3)
        for i in range(0, len(text), 4):
            yield Piece(text[i:i + 4], i)

    docs = db.create_table("docs", pa.table({"doc_id": pa.array(range(400), pa.int64()),
                                             "text": [f"doc{i:04d}" * (i % 3) for i in range(400)]}),
                           max_rows_per_file=100)
    view = db.create_udtf_view("pieces", source=docs.search(None).select(["doc_id", "text"]), udtf=pieces)
    before = view.version
    with pytest.raises(gp.UDFExecutionError) as info:
        view.refresh(spark=spark)
    message = str(info.value)
    assert "chunker 'pieces'" in message and "table 'docs'" in message and "view 'pieces'" in message, message
    assert "fragment 2" in message and re.search(r"os\._exit\(3\)", message), message
    assert "Py4J" not in message and "\tat " not in message and len(message.splitlines()) == 1
    assert not view.checkpoint_store.list_keys("running-")  # no marker left behind
    assert view.version == before and view.count_rows() == 0
    view.dataset().validate()

    flag.unlink()
    view.refresh(spark=spark)
    rows = view.to_arrow(columns=["doc_id", "piece", "start"]).to_pylist()
    expected = sorted((d, t[i:i + 4], i) for d, t in enumerate(f"doc{i:04d}" * (i % 3) for i in range(400))
                      for i in range(0, len(t), 4))
    assert sorted((r["doc_id"], r["piece"], r["start"]) for r in rows) == expected
    view.dataset().validate()
