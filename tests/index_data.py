"""Tables and measures the index tests share: clustered embeddings, recall@10 against an exact scan."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

from geneva_provider.core.refs import TableRef

DIM = 64
# The search settings the recall targets are documented at (docs/ARCHITECTURE.md, pipeline/indexes).
NPROBES, REFINE = 4, 20


def clustered(n: int, start: int = 0, seed: int = 0, centers: int = 16, scale: float = 4.0,
              shift: float = 0.0) -> pa.Table:
    """``n`` rows of ids and 64-d float32 vectors around ``centers`` fixed cluster centres (+ ``shift``)."""
    rng = np.random.default_rng(seed)
    middle = np.random.default_rng(12345).normal(size=(centers, DIM)) * scale
    x = (middle[rng.integers(0, centers, n)] + rng.normal(size=(n, DIM)) + shift).astype(np.float32)
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})


def write_table(path, data: pa.Table, rows_per_fragment: int) -> TableRef:
    uri = str(path / "t.lance")
    lance.write_dataset(data, uri, max_rows_per_file=rows_per_fragment)
    return TableRef("t", uri)


def queries(data: pa.Table, count: int = 50, seed: int = 7) -> np.ndarray:
    """Query vectors near rows of ``data``."""
    rng = np.random.default_rng(seed)
    x = vectors(data)
    return (x[rng.choice(len(x), count, replace=False)] + rng.normal(size=(count, DIM)) * 0.5).astype(np.float32)


def vectors(data: pa.Table) -> np.ndarray:
    col = data.column("vec").combine_chunks()
    return col.values.to_numpy(zero_copy_only=False).reshape(len(col), DIM)


def exact_ids(ds: lance.LanceDataset, q: np.ndarray, k: int = 10) -> set[int]:
    data = ds.to_table(columns=["id", "vec"])
    d = ((vectors(data) - q) ** 2).sum(axis=1)
    return set(data.column("id").to_numpy()[np.argsort(d, kind="stable")[:k]].tolist())


def recall(ds: lance.LanceDataset, qs: np.ndarray, k: int = 10, **search) -> float:
    """Mean recall@k of the index's answers (``nprobes`` / ``refine_factor``) against an exact scan."""
    hits = 0
    for q in qs:
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": search.get("nprobes", NPROBES),
                                   "refine_factor": search.get("refine_factor", REFINE)}, columns=["id"])
        hits += len(set(got.column("id").to_pylist()) & exact_ids(ds, q, k))
    return hits / (k * len(qs))


def embedding(row_id: int, model: int) -> np.ndarray:
    """Row ``row_id``'s clustered 64-d vector under embedding ``model``: each model puts a row in another of the
    same 16 clusters (the distribution stays the one the index was trained on; every row moves far)."""
    middle = np.random.default_rng(12345).normal(size=(16, DIM)) * 4.0
    noise = np.random.default_rng(row_id).normal(size=DIM)
    return (middle[(row_id + 7 * model) % 16] + noise).astype(np.float32)


def make_embed():
    """A UDF class computing ``embedding(id, model)`` into a fixed-size 64-d column."""
    import geneva_provider as gp

    @gp.udf(data_type=pa.list_(pa.float32(), DIM))
    class Embed:
        def __init__(self, model: int = 0):
            self.model = model

        def __call__(self, id: int) -> list[float]:
            return embedding(id, self.model).tolist()

    return Embed


class KilledAfter:
    """A task runner whose segment tasks for groups >= ``finished`` die before building (raise): a deterministic
    stand-in for a build killed after ``finished`` segments.  Everything else is the wrapped runner's."""

    def __init__(self, runner, finished: int) -> None:
        self.runner, self.finished = runner, finished

    def run_tasks(self, tasks, partition_fn, **kwargs):
        finished = self.finished

        def dies(part):
            for task in part:
                if task >= finished:
                    raise RuntimeError(f"killed before segment {task}")
                yield from partition_fn(iter([task]))
        return self.runner.run_tasks(tasks, dies, **kwargs)

    def options_for_tasks(self, storage_options):
        return self.runner.options_for_tasks(storage_options)

    def resource_profile(self, asks, label):
        return self.runner.resource_profile(asks, label)

    def parallelism(self) -> int:
        return self.runner.parallelism()

    def cancel(self, job_id: str) -> None:
        self.runner.cancel(job_id)

    def retries(self):
        return self.runner.retries()
