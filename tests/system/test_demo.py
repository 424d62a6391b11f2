"""``python -m geneva_provider.demo notebook`` as a user runs it: a process of its own on a real local Spark session,
over a database that holds other tables too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import geneva_provider as gp

ROOT = Path(__file__).resolve().parents[2]


def test_the_notebook_demo_replaces_its_own_table_and_leaves_the_other_tables_of_its_database(tmp_path):
    """The demo's default database is ``.demo/lake``, where the watcher example keeps its table: a demo run replaces
    the table ``events`` (an earlier run's) and nothing else of the directory."""
    lake = tmp_path / "lake"
    db = gp.connect(str(lake))
    comments = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "body": ["a", "b", "c"]})
    db.create_table("comments", comments)
    db.create_table("events", pa.table({"id": pa.array([999], pa.int64())}))  # a stale one, of another schema
    note = lake / "README.txt"
    note.write_text("not a table, not the demo's")

    demo = subprocess.run([sys.executable, "-m", "geneva_provider.demo", "notebook", "--db", str(lake), "--rows", "40"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "44 rows, 0 without values; table validated" in demo.stdout, demo.stdout[-3000:]

    assert db.table_names() == ["comments", "events"]
    assert db.open_table("comments").to_arrow().equals(comments)
    assert note.read_text() == "not a table, not the demo's"
    events = db.open_table("events").to_arrow(["id", "words", "embedding"])
    assert events.column("id").to_pylist() == list(range(44))
    assert events.column("words").null_count == 0 and events.column("embedding").null_count == 0
