"""The reference's input forms on real Spark: a struct's field by dot path, list values as numpy arrays or
lists, and a stateful class registered as an instance built with constructor arguments."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import geneva_provider as gp
from tests.helpers import clear_calls, read_calls

INFO = pa.struct([("vals", pa.list_(pa.int32())), ("tag", pa.string())])
N = 3_000


def _vals(i: int) -> list[int] | None:
    return None if i % 10 == 3 else list(range(i % 5))


def info_table() -> pa.Table:
    """Rows id = 0..N-1; ``info`` is NULL where id % 10 == 9, its ``vals`` NULL where id % 10 == 3."""
    info = [None if i % 10 == 9 else {"vals": _vals(i), "tag": f"t{i}"} for i in range(N)]
    vecs = [None if i % 7 == 0 else [float(i), float(i % 3)] for i in range(N)]
    return pa.table({"id": pa.array(range(N), pa.int64()), "info": pa.array(info, INFO),
                     "vec": pa.array(vecs, pa.list_(pa.float32())),
                     "fixed": pa.array([[float(i), 1.0] for i in range(N)], pa.list_(pa.float32(), 2))})


def expected_sum(i: int, vals: list[int] | None) -> int | None:
    return None if i % 10 == 9 or vals is None else sum(vals)


def counting_sum(log_dir: str) -> gp.UDF:
    @gp.udf(data_type=pa.int64(), input_columns=["id", "info.vals"])
    def sum_vals(id: int, vals: np.ndarray | None) -> int | None:
        with open(os.path.join(log_dir, f"{os.getpid()}.log"), "a") as f:
            f.write(f"{id}\n")
        assert vals is None or isinstance(vals, np.ndarray)
        return None if vals is None else int(vals.sum())

    return sum_vals


def test_a_struct_field_read_by_dot_path_is_computed_and_judged_by_that_field_alone(db, spark, call_dir):
    tbl = db.create_table("things", info_table(), max_rows_per_file=1_000)
    tbl.add_columns({"s": counting_sum(call_dir)})
    # A filtered backfill reads its rows by take (the struct comes back pruned), the rest by scan.
    part = tbl.backfill("s", where="id % 7 = 0", spark=spark, progress=False)
    assert part.rows_computed == len(range(0, N, 7))
    rest = tbl.backfill("s", spark=spark, progress=False)
    assert rest.rows_computed == N - part.rows_computed
    assert sorted(read_calls(call_dir)) == list(range(N))
    got = tbl.to_arrow(["id", "s"]).to_pydict()
    assert dict(zip(got["id"], got["s"], strict=True)) == {i: expected_sum(i, _vals(i)) for i in range(N)}

    # Another field of the struct changes: the values computed from info.vals stay valid.
    clear_calls(call_dir)
    tbl.dataset().update({"info": "named_struct('vals', info.vals, 'tag', 'changed')"}, where="id % 100 = 1")
    assert tbl.udf_columns()["s"]["rows_stale"] == 0
    assert tbl.backfill("s", spark=spark, progress=False).rows_computed == 0 and read_calls(call_dir) == []
    # The field itself changes: exactly those rows are computed again.
    tbl.dataset().update({"info": "named_struct('vals', [7, 8], 'tag', info.tag)"}, where="id % 100 = 2")
    changed = list(range(2, N, 100))
    assert tbl.udf_columns()["s"]["rows_stale"] == len(changed)
    assert tbl.backfill("s", spark=spark, progress=False).rows_computed == len(changed)
    assert sorted(read_calls(call_dir)) == changed
    got = tbl.to_arrow(["id", "s"]).to_pydict()
    assert dict(zip(got["id"], got["s"], strict=True)) == {
        i: 15 if i % 100 == 2 else expected_sum(i, _vals(i)) for i in range(N)}
    tbl.dataset().validate()


@gp.udf
def norm(vec: np.ndarray | None) -> float | None:
    assert vec is None or (isinstance(vec, np.ndarray) and vec.dtype == np.float32)
    return None if vec is None else float(np.sqrt(np.sum(vec.astype(np.float64) ** 2)))


@gp.udf
def count(vec: list[float] | None) -> int | None:
    assert vec is None or isinstance(vec, list)
    return None if vec is None else len(vec)


@gp.udf(data_type=pa.list_(pa.float32(), 2))
def shifted(fixed: np.ndarray) -> np.ndarray:
    return fixed + np.float32(1)


def test_list_columns_come_to_scalar_udfs_as_numpy_arrays_or_lists(db, spark):
    tbl = db.create_table("things", info_table(), max_rows_per_file=1_000)
    tbl.add_columns({"n": (norm, ["vec"]), "c": (count, ["vec"]), "f": shifted})
    for column in ("n", "c", "f"):
        assert tbl.backfill(column, spark=spark, progress=False).rows_computed == N
    got = tbl.to_arrow(["id", "n", "c", "f"]).to_pydict()
    assert got["n"] == [None if i % 7 == 0 else float(np.sqrt(i * i + (i % 3) ** 2)) for i in range(N)]
    assert got["c"] == [None if i % 7 == 0 else 2 for i in range(N)]
    assert got["f"] == [[float(i) + 1, 2.0] for i in range(N)]
    tbl.dataset().validate()


@gp.udf(data_type=pa.list_(pa.float32(), 2))
class Embed(Callable):
    """The reference's stateful form: constructor arguments, heavy state loaded in setup() once per worker."""

    def __init__(self, model: str = "small", log_dir: str = "") -> None:
        self.model = model
        self.log_dir = log_dir
        self.weight: float | None = None

    def setup(self) -> None:
        Path(self.log_dir, f"setup-{self.model}-{os.getpid()}-{time.time_ns()}").touch()
        self.weight = float(len(self.model))  # stands for loading a model

    def __call__(self, text: str) -> list[float]:
        with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as f:
            f.write(f"{text[1:]}\n")
        assert self.weight is not None
        return [float(len(text)), self.weight]


def test_a_stateful_instance_travels_with_its_arguments_and_sets_up_once_per_worker(db, spark, tmp_path):
    logs = {m: tmp_path / m for m in ("m2", "large-model")}
    for d in logs.values():
        d.mkdir()
    texts = pa.table({"text": [f"t{i}" for i in range(N)]})
    tbl = db.create_table("docs", texts, max_rows_per_file=500)
    tbl.add_columns({"e": Embed(model="m2", log_dir=str(logs["m2"])),
                     "big": Embed(model="large-model", log_dir=str(logs["large-model"]))})
    assert not [p for d in logs.values() for p in d.iterdir()]  # nothing was set up where it was registered
    for column in ("e", "big"):
        res = tbl.backfill(column, spark=spark, checkpoint_size=100, progress=False)
        assert res.rows_computed == N
    got = tbl.to_arrow(["text", "e", "big"]).to_pydict()
    assert got["e"] == [[float(len(t)), 2.0] for t in got["text"]]
    assert got["big"] == [[float(len(t)), 11.0] for t in got["text"]]
    for model, d in logs.items():
        assert sorted(read_calls(d)) == list(range(N))  # each row computed once
        setups = [p.name.split("-")[-2] for p in d.glob("setup-*")]
        callers = {p.stem for p in d.glob("*.log")}
        # 30 checkpoints of 100 rows over 2 task slots: set up once per worker process, not per batch.
        assert 1 <= len(setups) <= 4 and len(set(setups)) == len(setups), (model, setups)
        assert callers <= set(setups), (model, callers, setups)
        assert all(p.name.startswith(f"setup-{model}-") for p in d.glob("setup-*"))
    tbl.dataset().validate()
