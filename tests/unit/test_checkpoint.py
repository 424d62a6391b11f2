"""Checkpoint key formats (the store layout) and the two stores."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

from geneva_provider.core.ranges import count_of, missing_ranges, positions_of, runs_of, slice_runs, sorted_unique
from geneva_provider.core.store.checkpoint import InMemoryCheckpointStore, LanceCheckpointStore, split_key_uri
from geneva_provider.core.store.layout import (
    BatchKey,
    StagedKey,
    batch_prefix,
    job_prefix,
    md5_hex,
    parse_batch_key,
    parse_staged_key,
)


def test_key_format_is_the_documented_one_and_hashes_user_strings():
    job = job_prefix("my udf/name_x", "0123456789abcdef", "col_with_underscores", "x > 1 AND s = 'a_b'",
                     "/data/t.lance")
    prefix = batch_prefix(job, ["a.lance", "b.lance"])
    key = BatchKey(prefix, 12, 0, 5000).key()
    assert re.fullmatch(
        r"udf-[0-9a-f]{16}_ver-0123456789abcdef_col-[0-9a-f]{16}_where-[0-9a-f]{32}_uri-[0-9a-f]{32}"
        r"_srcfiles-[0-9a-f]{32}_frag-12_range-0-5000", key)
    assert f"_where-{md5_hex('x > 1 AND s = ' + repr('a_b'))}_" in key
    for raw in ("my udf", "/", "col_with", "x > 1"):
        assert raw not in key
    assert len(key) < 250


def test_keys_parse_from_the_right():
    prefix = "udf-a_ver-b_col-c_where-d_uri-e_srcfiles-f_frag-9_range-1-2"  # a prefix that looks like a key
    parsed = parse_batch_key(BatchKey(prefix, 3, 100, 200).key())
    assert (parsed.prefix, parsed.frag_id, parsed.start, parsed.end) == (prefix, 3, 100, 200)
    assert parse_staged_key(StagedKey("job_x_frag-3").key()) == "job_x_frag-3"
    assert parse_batch_key(StagedKey("job_x").key()) is None
    assert parse_staged_key(BatchKey("job_x", 1, 0, 5).key()) is None


@pytest.mark.parametrize("kind", ["memory", "lance"])
def test_store_set_get_list_delete(kind, tmp_path):
    store = InMemoryCheckpointStore() if kind == "memory" else LanceCheckpointStore(str(tmp_path / "ck"))
    batch = pa.record_batch({"_rowaddr": pa.array([1, 2], pa.uint64()), "value": [10, 20]})
    store["a_frag-1_range-0-2"] = batch
    store["a_frag-2_range-0-2"] = batch
    store["b_frag-1_range-0-2"] = batch
    assert "a_frag-1_range-0-2" in store and "zzz" not in store
    assert store["a_frag-1_range-0-2"].to_pydict() == batch.to_pydict()
    assert store.list_keys("a_") == ["a_frag-1_range-0-2", "a_frag-2_range-0-2"]
    store.put_text("doc", '{"file": "x.lance", "n": [1, 2]}')
    assert store.get_text("doc") == '{"file": "x.lance", "n": [1, 2]}'
    store.delete("a_frag-1_range-0-2")
    assert store.list_keys("a_") == ["a_frag-2_range-0-2"]
    with pytest.raises(KeyError):
        store["missing"]
    with pytest.raises(ValueError, match="invalid checkpoint key"):
        store["a/b"] = batch


def test_lance_store_files_are_one_per_key_with_no_leftovers(tmp_path):
    store = LanceCheckpointStore(str(tmp_path / "ck"))
    store["k1"] = pa.table({"value": [1]})
    store["k1"] = pa.table({"value": [2]})  # overwrite
    assert sorted(os.listdir(tmp_path / "ck")) == ["k1.lance"]
    assert store["k1"].column("value").to_pylist() == [2]
    root, key = split_key_uri(store.key_uri("k1"))
    assert (root, key) == (str(tmp_path / "ck"), "k1")


def test_a_store_the_storage_fails_under_raises_an_os_error_a_retry_can_fix(tmp_path):
    """Lance reports the failure as a RuntimeError; the store says OSError, which the retry policy retries."""
    from geneva_provider.hooks.errors import retry_policy

    (tmp_path / "ck").write_text("a file where the store's directory should be")
    store = LanceCheckpointStore(str(tmp_path / "ck"))
    with pytest.raises(OSError, match=r"cannot look up k1 in .*ck: LanceError\(IO\).*Not a directory") as err:
        "k1" in store  # noqa: B015
    decision = retry_policy().evaluate(exception=err.value, try_number=1, max_tries=3, context=None)
    assert decision.action.value == "retry" and "an I/O error" in decision.reason


def test_range_arithmetic():
    assert missing_ranges(100, []) == [(0, 100)]
    assert missing_ranges(100, [(0, 10), (20, 30), (25, 40)]) == [(10, 20), (40, 100)]
    assert missing_ranges(100, [(0, 100)]) == []
    assert runs_of([False, True, True, False, True]) == [(1, 3), (4, 5)] and runs_of([False]) == []
    assert count_of([(1, 3), (4, 5)]) == 3 and positions_of([(1, 3), (4, 5)]).tolist() == [1, 2, 4]
    assert slice_runs([(1, 3), (4, 5), (7, 9)], 1, 4) == [(2, 3), (4, 5), (7, 8)]


@pytest.mark.parametrize("ids", [[], [5], [1, 2, 3, 9], [1, 1, 2, 2, 2, 7], [3, 1, 2, 3, 0], [4, 4, 4],
                                 [2**40, 7, 2**40, -3]])
def test_sorted_unique_gives_what_np_unique_gives_whether_the_ids_come_sorted_or_not(ids):
    import numpy as np

    got = sorted_unique(np.asarray(ids, np.int64))
    assert got.dtype == np.int64 and got.tolist() == sorted(set(ids))


def test_a_checkpoint_of_a_null_struct_round_trips(tmp_path):
    """Lance 2.0 files (the store's default, cheaper to write) cannot hold a struct's validity; such a batch is
    written in 2.1 instead of failing the apply task that stores it."""
    store = LanceCheckpointStore(str(tmp_path / "store"))
    kind = pa.struct([("a", pa.int64()), ("b", pa.string())])
    info = pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "z"}], kind)
    table = pa.table({"_rowaddr": pa.array([0, 1, 2], pa.uint64()), "info": info, "n": [1, 2, 3]})
    store["k"] = table
    assert store["k"].equals(table)
    assert store["k"].column("info").to_pylist() == [{"a": 1, "b": "x"}, None, {"a": None, "b": "z"}]


def test_a_local_store_keeps_documents_as_text_files_and_still_reads_lance_ones(tmp_path):
    """Documents (job records, plans) are plain ``.json`` files on a local store -- a one-row Lance file costs ~10x
    more to write and read -- and one written as a Lance file (by an earlier version) is still read."""
    root = tmp_path / "ck"
    store = LanceCheckpointStore(str(root))
    store["old"] = pa.table({"json": ['{"v": 1}']})  # how a document was stored before
    assert store.get_text("old") == '{"v": 1}'
    store.put_text("old", '{"v": 2}')  # rewritten: one file of the new form, none of the old
    store.put_text("new", '{"ü": "✓"}')
    assert sorted(os.listdir(root)) == ["new.json", "old.json"]
    assert (store.get_text("old"), store.get_text("new")) == ('{"v": 2}', '{"ü": "✓"}')
    assert store["new"].column("json").to_pylist() == ['{"ü": "✓"}']
    assert "new" in store and store.list_keys() == ["new", "old"]
    stamp = store.stamp("new")
    store.put_text("new", '{"ü": "✓✓"}')
    assert stamp is not None and store.stamp("new") not in (None, stamp)
    store["new"] = pa.table({"value": [1]})  # a table under a document's key replaces it
    assert sorted(os.listdir(root)) == ["new.lance", "old.json"]
    store.delete("old")
    store.delete("new")
    assert os.listdir(root) == [] and store.list_keys() == [] and "old" not in store
    with pytest.raises(KeyError):
        store.get_text("old")
