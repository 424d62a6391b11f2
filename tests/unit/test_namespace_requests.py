"""What the namespace takes from the spec's request models that needs no JVM: every ``CreateTableIndexRequest``
parameter carried to the index spec (IVF iterations and partition size, the full-text tokenizer) or refused by
name, the checksums of a view's UDTF and of a UDF's manifest checked, a UDF column's manifest kept on its field."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import NamedTuple

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry,
    AddVirtualColumnEntry,
    AddVirtualColumnOutputEntry,
    MaterializedViewUdtfEntry,
)

import geneva_provider as gp
from geneva_provider.core.contracts.index_models import FtsConfig, IndexSpec
from geneva_provider.core.contracts.operations import CreateIndex, SourceQuery
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.namespace import GenevaNamespace, convert
from geneva_provider.operations import prepare


class Word(NamedTuple):
    word: str


@gp.udf(data_type=pa.int64(), name="plus_one", version="2")
def plus_one(x: int) -> int:
    return x + 1


@pytest.fixture
def ns(tmp_path) -> GenevaNamespace:
    root = str(tmp_path / "lake")
    gp.connect(root).create_table("t", pa.table({"x": pa.array(range(10), pa.int64()),
                                                 "s": [f"doc {x}" for x in range(10)]}))
    namespace = ln.connect("geneva", {"root": root})
    assert isinstance(namespace, GenevaNamespace)
    return namespace


def test_every_index_parameter_of_the_request_reaches_the_spec():
    fts = convert.create_index(ln.CreateTableIndexRequest(
        id=["t"], column="s", index_type="FTS", name="s_text", with_position=True, base_tokenizer="whitespace",
        language="French", max_token_length=12, lower_case=False, stem=False, remove_stop_words=False,
        ascii_folding=False))
    assert fts.fts_settings() == {"with_position": True, "base_tokenizer": "whitespace", "language": "French",
                                  "max_token_length": 12, "lower_case": False, "stem": False,
                                  "remove_stop_words": False, "ascii_folding": False}
    assert (fts.index_type, fts.name) == ("FTS", "s_text")
    ivf = convert.create_index(ln.CreateTableIndexRequest(id=["t"], column="vec", index_type="ivf_pq",
                                                          max_iterations=7, target_partition_size=500))
    assert (ivf.index_type, ivf.max_iterations, ivf.target_partition_size, ivf.fts_settings()) == (
        "IVF_PQ", 7, 500, {})
    spec = IndexSpec.of("vec", "IVF_PQ", max_iterations=7, target_partition_size=500)
    assert (spec.max_iterations, spec.target_partition_size, spec.num_partitions) == (7, 500, None)


@pytest.mark.parametrize(("params", "message"), [
    ({"num_partitions": 4, "target_partition_size": 100}, r"num_partitions=4 and target_partition_size=100"),
    ({"index_type": "BTREE", "max_iterations": 5}, r"max_iterations=5 is for a vector \(IVF\) index, not BTREE"),
    ({"max_iterations": 0}, r"max_iterations must be a positive whole number, got 0"),
    ({"target_partition_size": True}, r"target_partition_size must be a positive whole number, got True"),
])
def test_bad_index_parameters_are_refused_naming_them(params, message):
    with pytest.raises(InvalidArgumentError, match=message):
        IndexSpec.of("vec", **{"index_type": "IVF_PQ", **params})


def test_a_tokenizer_setting_on_another_index_type_or_another_branch_is_refused_before_anything_changes(ns):
    version = ns.catalog.ref("t").dataset().version
    with pytest.raises(InvalidArgumentError, match=r"table 't'.*'x'.*tokenizer configuration is for an INVERTED"):
        prepare(CreateIndex(id=["t"], column="x", index_type="BTREE", with_position=True), ns.catalog)
    with pytest.raises(InvalidArgumentError, match=r"max_token_length"):
        prepare(CreateIndex(id=["t"], column="s", index_type="FTS", max_token_length=-1), ns.catalog)
    with pytest.raises(InvalidArgumentError, match=r"branch 'dev': jobs run on a table's main branch only"):
        ns.create_table_index(ln.CreateTableIndexRequest(id=["t"], column="x", index_type="BTREE", branch="dev"))
    with pytest.raises(InvalidArgumentError, match=r"intra_applier_concurrency=4 is not supported by a view refresh"):
        ns.refresh_materialized_view(ln.RefreshMaterializedViewRequest(id=["t"], intra_applier_concurrency=4))
    with pytest.raises(InvalidArgumentError, match=r"branch 'dev'"):
        ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=["t"], column="x", branch="dev"))
    assert ns.catalog.ref("t").dataset().version == version
    assert ns.catalog.ref("t").dataset().list_indices() == []


def _entry(**extra) -> AddVirtualColumnEntry:
    return AddVirtualColumnEntry(input_columns=["x"], image="", udf=plus_one.pickled_b64(), udf_name="plus_one",
                                 udf_version="2", outputs=[AddVirtualColumnOutputEntry(
                                     column="y", struct_field="", data_type={"type": "int64"}, nullable=True)],
                                 **extra)


def test_a_udf_columns_manifest_is_checked_against_its_checksum_and_kept_on_its_field(ns):
    manifest = json.dumps({"name": "env-7", "pip": ["numpy==2.1.0"]})
    version = ns.catalog.ref("t").dataset().version
    with pytest.raises(InvalidArgumentError, match=r"column 'y': manifest_checksum 'beef' is not the SHA-256"):
        ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(id=["t"], new_columns=[
            AddColumnsEntry(name="y", virtual_column=_entry(manifest=manifest, manifest_checksum="beef"))]))
    assert ns.catalog.ref("t").dataset().version == version and "y" not in ns.catalog.ref("t").dataset().schema.names
    digest = hashlib.sha256(manifest.encode()).hexdigest()
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(id=["t"], new_columns=[
        AddColumnsEntry(name="y", virtual_column=_entry(manifest=manifest, manifest_checksum=digest,
                                                        field_metadata={"team": "search"}))]))
    field = ns.catalog.ref("t").dataset().schema.field("y")
    assert field.metadata[convert.MANIFEST_KEY.encode()] == manifest.encode()
    assert field.metadata[b"team"] == b"search"
    assert gp.connect(ns.config.root).open_table("t").udf_columns()["y"]["name"] == "plus_one"


def test_a_views_udtf_is_checked_against_its_sha_and_its_kind(ns):
    @gp.chunker
    def words(s: str) -> Iterator[Word]:
        for w in s.split():
            yield Word(w)

    text = words.pickled_b64()
    source = SourceQuery(id=["t"]).model_dump_json()

    def view(**spec):
        fields = {"kind": "chunker", "udtf": text, "udtf_sha": "", "udtf_name": "words", "udtf_version": "1", **spec}
        return ln.CreateMaterializedViewRequest(id=["w"], kind="chunker", source_query=source, output_schema="",
                                                with_no_data=True, udtf_spec=MaterializedViewUdtfEntry(**fields))
    with pytest.raises(InvalidArgumentError, match=r"udtf_spec.udtf_sha '0+' is not the SHA-256 of what was sent"):
        ns.create_materialized_view(view(udtf_sha="0" * 64))
    with pytest.raises(InvalidArgumentError, match=r"udtf_spec.kind 'udtf' contradicts the request's kind 'chunker'"):
        ns.create_materialized_view(view(kind="udtf"))
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == ["t"]  # nothing created
    # the digest of the text as sent, or of the bytes it encodes: both are the envelope's
    for digest in (hashlib.sha256(text.encode()).hexdigest(), hashlib.sha256(base64.b64decode(text)).hexdigest()):
        convert.create_view(view(udtf_sha=digest.upper()))
    made = ns.create_materialized_view(view(udtf_sha=hashlib.sha256(text.encode()).hexdigest()))
    assert made.job_id is None and sorted(ns.list_tables(ln.ListTablesRequest(id=[])).tables) == ["t", "w"]


def test_the_fts_defaults_are_lances_when_the_request_sets_none():
    assert CreateIndex(id=["t"], index_type="FTS").fts_settings() == {}
    assert FtsConfig() == FtsConfig(**CreateIndex(id=["t"], index_type="FTS").fts_settings())
