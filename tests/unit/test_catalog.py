"""Tables through the Lance namespace (directory implementation), on local disk and on an object store."""

from __future__ import annotations

import lance
import pytest

import geneva_provider as gp
from tests.helpers import events_table


def exercise(db: gp.Connection, storage_options: dict[str, str] | None) -> None:
    """Create, list, open, overwrite and drop, next to a table written without the package."""
    lance.write_dataset(events_table(5), f"{db.uri}/legacy.lance", storage_options=storage_options)
    assert db.table_names() == ["legacy"]
    t = db.create_table("events", events_table(10), max_rows_per_file=4)
    assert t.uri == f"{db.uri}/events.lance"
    assert len(t.dataset().get_fragments()) == 3 and t.dataset().has_stable_row_ids
    assert db.table_names() == ["events", "legacy"]
    with pytest.raises(gp.InvalidArgumentError, match="'events' already exists"):
        db.create_table("events", events_table(3))
    assert db.create_table("events", events_table(7), mode="overwrite").count_rows() == 7
    assert db.open_table("legacy").count_rows() == 5
    assert db.open_table("events").to_arrow(["x"]).column("x").to_pylist() == list(range(7))
    db.drop_table("legacy")
    assert db.table_names() == ["events"]
    with pytest.raises(gp.TableNotFoundError, match="table 'legacy' not found"):
        db.open_table("legacy")
    with pytest.raises(gp.TableNotFoundError, match="table 'legacy' not found"):
        db.drop_table("legacy")
    with pytest.raises(gp.InvalidArgumentError, match="invalid table name 'a/b'"):
        db.create_table("a/b", events_table(1))
    db.drop_table("events")
    assert db.table_names() == []


def test_directory_namespace_on_local_disk(tmp_path):
    exercise(gp.connect(str(tmp_path / "lake")), None)


def test_directory_namespace_on_an_object_store_passes_the_storage_options(s3):
    uri = f"s3://{s3.bucket}/db"
    db = gp.connect(uri, storage_options=s3.storage_options)
    assert repr(db) == f"Connection(uri='{uri}')" and "test-secret" not in repr(db.catalog)
    exercise(db, s3.storage_options)


def test_a_lance_connection_names_the_namespace_and_its_storage_options(s3, monkeypatch):
    import json

    from airflow.sdk.log import _secrets_masker

    from geneva_provider.hooks.lance import LanceHook

    db = gp.connect(f"s3://{s3.bucket}/hooked", storage_options=s3.storage_options)
    db.create_table("events", events_table(10))
    monkeypatch.setenv("AIRFLOW_CONN_LANCE_S3", json.dumps({
        "conn_type": "lance", "host": f"s3://{s3.bucket}/hooked",
        "extra": {"secret_storage_options": s3.storage_options, "namespace_impl": "dir",
                  "secret_namespace_properties": {"dir_listing_enabled": "true"}}}))
    hook = LanceHook("lance_s3")
    assert hook.database.table_names() == ["events"]
    assert hook.open_table("events").count_rows() == 10
    ok, message = hook.test_connection()
    assert ok and message.startswith("1 tables in s3://")
    secret = s3.storage_options["aws_secret_access_key"]
    assert secret not in repr(hook.database) and secret not in str(_secrets_masker().redact(f"key={secret}"))




def test_a_child_namespace_s_tables_are_created_listed_opened_and_dropped_by_their_id(tmp_path):
    """Catalog.child(["lake"]): table "docs" is ["lake", "docs"] to the namespace (with its manifest, which places
    it where it chooses), apart from the root's tables of the same name."""
    import lance_namespace as ln

    from geneva_provider.core.catalog import Catalog

    root = str(tmp_path / "lake")
    inner = ln.connect("dir", {"root": root})
    inner.create_namespace(ln.CreateNamespaceRequest(id=["lake"]))
    catalog = Catalog(root)
    child = catalog.child(["lake"], inner)
    assert catalog.child([]) is catalog and child.parent == ("lake",) and "lake" in repr(child)
    child.create("docs", events_table(6))
    catalog.create("docs", events_table(2))
    assert child.names() == ["docs"] and child.exists("docs") and not child.exists("other")
    ref = child.ref("docs")
    assert ref.uri == inner.describe_table(ln.DescribeTableRequest(id=["lake", "docs"])).location
    assert ref.dataset().count_rows() == 6 and catalog.ref("docs").dataset().count_rows() == 2
    assert child.location("other") is None
    with pytest.raises(gp.TableNotFoundError, match=r"table 'other' not found in .* \(namespace lake\)"):
        child.ref("other")
    # without a client: the directory namespace with its manifest over the same root, as the DAG's tasks find it
    assert Catalog(root).of_table(["lake", "docs"]).ref("docs") == ref and Catalog(root).of_table(["docs"]).parent == ()
    with pytest.raises(gp.TableNotFoundError, match=r"table 'docs' not found in .* \(namespace nope\): namespace "
                                                    r"nope does not exist"):
        Catalog(root).of_table(["nope", "docs"]).ref("docs")
    child.drop("docs")
    assert child.names() == [] and catalog.names() == ["docs"]
