"""Column revisions are recoverable: a rename lands as one commit (the column, its fingerprint column and the
metadata naming them), a rerun of an alteration that landed finishes it, and a multi-output group follows a rename
of any of its columns and refuses what would break it (a non-nullable or retyped member).

The kill is a deterministic stand-in at the exact point: the process "dies" (a BaseException nothing catches)
right after the first commit the alteration makes, before ``alter_columns`` returns -- the point between the
rename and the fingerprint column's owner when they were two commits.  The SIGKILL of a real process at that point
is tests/system/test_alter_kill.py; the backfills here run on ``InProcessRunner`` (no JVM).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import ColumnError
from geneva_provider.core.fingerprints import FINGERPRINT_OF, fingerprint_column, holds_fingerprints_of
from geneva_provider.core.functions.udf import udf_column_info
from geneva_provider.pipeline import schema_changes
from geneva_provider.stages import InProcessRunner
from tests.helpers import events_table
from tests.unit.test_multi_output import pair

ROWS = 6


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return 2 * x


class _Killed(BaseException):
    """The process dying: no ``except Exception`` on the way out catches it."""


def _kill_after_first_commit(monkeypatch, commits: int = 1):
    """Makes the next schema change "die" right after its first (or ``commits``-th) commit landed, as a SIGKILL
    would."""
    real = schema_changes.commit
    made = []

    def commit_then_die(*args, **kwargs):
        landed = real(*args, **kwargs)
        made.append(landed)
        if len(made) == commits:
            monkeypatch.setattr(schema_changes, "commit", real)
            raise _Killed(f"killed after the commit of version {landed.value}")
        return landed

    monkeypatch.setattr(schema_changes, "commit", commit_then_die)


def _states(tbl):
    return {c.column: (c.rows_valid, c.rows_stale, c.rows_missing) for c in tbl.status().columns}


def _backfill(tbl, column):
    return tbl.backfill(column, spark=InProcessRunner(), progress=False)


@pytest.fixture
def tbl(db):
    t = db.create_table("events", events_table(ROWS), max_rows_per_file=3)
    t.add_columns({"y": double})
    _backfill(t, "y")
    return t


def test_a_rename_lands_as_one_commit_with_its_fingerprint_columns_owner(tbl):
    version = tbl.version
    assert tbl.alter_columns({"path": "y", "rename": "y2"}) == version + 1 == tbl.version
    fp = tbl.schema.field(fingerprint_column("y2"))
    assert holds_fingerprints_of(fp, "y2") and "y" not in tbl.schema.names
    assert _states(tbl) == {"y2": (ROWS, 0, 0)}
    tbl.dataset().validate()


def test_a_kill_right_after_the_renames_commit_leaves_a_table_that_backfills_and_a_rerun_that_succeeds(
        tbl, monkeypatch):
    _kill_after_first_commit(monkeypatch)
    with pytest.raises(_Killed):
        tbl.alter_columns({"path": "y", "rename": "y2"})

    assert _states(tbl) == {"y2": (ROWS, 0, 0)}  # every value valid, none counted missing
    version = tbl.version
    assert tbl.alter_columns({"path": "y", "rename": "y2"}) == version  # the same alteration again: it landed
    assert tbl.version == version
    tbl.add(events_table(2, start=ROWS))
    assert _backfill(tbl, "y2").rows_computed == 2  # only the new rows: no value lost
    assert tbl.to_arrow(["x", "y2"]).to_pydict()["y2"] == [2 * x for x in range(ROWS + 2)]
    assert _states(tbl) == {"y2": (ROWS + 2, 0, 0)}
    tbl.dataset().validate()


def test_a_rename_left_half_done_by_an_older_version_is_finished_by_the_rerun_or_the_next_backfill(tbl):
    # What the two commits' first left: the column and its fingerprint column renamed, the owner not yet.
    tbl.dataset().alter_columns({"path": "y", "name": "y2"}, {"path": fingerprint_column("y"),
                                                               "name": fingerprint_column("y2")})
    assert tbl.schema.field(fingerprint_column("y2")).metadata[FINGERPRINT_OF.encode()] == b"y"

    assert _states(tbl) == {"y2": (ROWS, 0, 0)}  # status reads it as the interrupted rename it is
    assert _backfill(tbl, "y2").rows_computed == 0  # the backfill finishes the rename; every value was valid
    assert holds_fingerprints_of(tbl.schema.field(fingerprint_column("y2")), "y2")
    tbl.dataset().validate()


def test_the_rerun_of_a_half_done_rename_finishes_it(tbl):
    tbl.dataset().alter_columns({"path": "y", "name": "y2"}, {"path": fingerprint_column("y"),
                                                               "name": fingerprint_column("y2")})
    tbl.alter_columns({"path": "y", "rename": "y2"})
    assert holds_fingerprints_of(tbl.schema.field(fingerprint_column("y2")), "y2")
    assert _states(tbl) == {"y2": (ROWS, 0, 0)}
    with pytest.raises(ColumnError, match=r"column 'y' not found in table 'events'"):
        tbl.alter_columns({"path": "y", "rename": "y3"})  # another alteration of a column that is gone


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return 3 * x


def test_a_rename_and_a_revised_udf_land_together_and_their_rerun_after_a_kill_finds_them_landed(tbl, monkeypatch):
    version = tbl.version
    _kill_after_first_commit(monkeypatch)
    with pytest.raises(_Killed):
        tbl.alter_columns({"path": "y", "rename": "y2", "udf": triple})
    assert tbl.version == version + 1
    assert tbl.alter_columns({"path": "y", "rename": "y2", "udf": triple}) == version + 1 == tbl.version
    assert udf_column_info(tbl.schema.field("y2").metadata).name == "triple"
    assert _states(tbl) == {"y2": (0, ROWS, 0)}
    assert _backfill(tbl, "y2").rows_computed == ROWS
    assert tbl.to_arrow(["y2"]).column("y2").to_pylist() == [3 * x for x in range(ROWS)]


@pytest.mark.parametrize("commits_before_the_kill", [1, 2])
def test_a_plain_column_made_non_nullable_and_renamed_is_finished_by_the_rerun_after_a_kill(
        db, monkeypatch, commits_before_the_kill):
    t = db.create_table("events", events_table(ROWS), max_rows_per_file=3)
    version = t.version
    _kill_after_first_commit(monkeypatch, commits_before_the_kill)  # the nullability's commit, or the rename's
    with pytest.raises(_Killed):
        t.alter_columns({"path": "x", "rename": "x1", "nullable": False})
    t.alter_columns({"path": "x", "rename": "x1", "nullable": False})
    assert t.schema.names == ["id", "x1"] and not t.schema.field("x1").nullable
    assert t.to_arrow(["x1"]).column("x1").to_pylist() == list(range(ROWS))
    assert t.version == version + 2  # the nullability, then the rename: each landed once
    t.dataset().validate()


def test_the_alter_columns_operator_run_again_after_its_rename_landed_succeeds_changing_nothing(lance_db):
    from geneva_provider.operators.backfill import GenevaAlterColumnsOperator
    from tests.helpers import context

    t = lance_db.create_table("events", events_table(ROWS), max_rows_per_file=3)
    t.add_columns({"y": double})
    _backfill(t, "y")
    op = GenevaAlterColumnsOperator(task_id="alter", table="events", alterations=[{"path": "y", "rename": "y2"}])
    first = op.execute(context())
    again = op.execute(context())  # a retry whose try before died after the commit
    assert again["version"] == first["version"] == t.version
    assert _states(t) == {"y2": (ROWS, 0, 0)}


# ---------------------------------------------------------------------- multi-output groups
@pytest.fixture
def grouped(db):
    t = db.create_table("events", events_table(ROWS), max_rows_per_file=3)
    t.add_columns(gp.UnpackedUDF(pair, prefix="p_"))
    _backfill(t, "p_left")
    return t


@pytest.mark.parametrize(("renamed", "to"), [("p_right", "q"), ("p_left", "q")])
def test_a_group_follows_the_rename_of_any_of_its_columns(grouped, renamed, to):
    version = grouped.version
    grouped.alter_columns({"path": renamed, "rename": to})
    assert grouped.version == version + 1
    columns = ["q", "p_right"] if renamed == "p_left" else ["p_left", "q"]
    assert list(grouped.udf_columns()) == [columns[0]]
    assert udf_column_info(grouped.schema.field(columns[0]).metadata).outputs == columns
    assert _states(grouped) == {columns[0]: (ROWS, 0, 0)}  # the values stay valid

    grouped.add(events_table(2, start=ROWS))  # a later add() works
    assert _backfill(grouped, to).rows_computed == 2  # any column of the group backfills it
    t = grouped.to_arrow(["x", *columns]).to_pydict()
    assert t[columns[0]] == [x + 1 for x in t["x"]] and t[columns[1]] == [f"r{x}" for x in t["x"]]
    assert _states(grouped) == {columns[0]: (ROWS + 2, 0, 0)}
    grouped.dataset().validate()

    with pytest.raises(ColumnError, match=r"drop all of them in one call"):
        grouped.drop_columns([columns[1]])
    grouped.drop_columns(columns)
    assert grouped.schema.names == ["id", "x"]


def test_a_whole_group_renamed_in_one_call_stays_one_group(grouped):
    grouped.alter_columns({"path": "p_left", "rename": "a"}, {"path": "p_right", "rename": "b"})
    assert udf_column_info(grouped.schema.field("a").metadata).outputs == ["a", "b"]
    assert holds_fingerprints_of(grouped.schema.field(fingerprint_column("a")), "a")
    assert _states(grouped) == {"a": (ROWS, 0, 0)}
    grouped.add(events_table(1, start=ROWS))
    assert _backfill(grouped, "b").rows_computed == 1
    assert grouped.to_arrow(["b"]).column("b").to_pylist() == [f"r{x}" for x in range(ROWS + 1)]


@pytest.mark.parametrize(("alteration", "message"), [
    ({"path": "p_right", "nullable": False}, r"column 'p_right' of table 'events' is in the multi-output group "
                                             r"\['p_left', 'p_right'\] that UDF 'pair' computes in one call: it must "
                                             r"stay nullable"),
    ({"path": "p_left", "nullable": False}, r"column 'p_left' of table 'events' is in the multi-output group "
                                            r".*must stay nullable"),
    ({"path": "p_right", "data_type": pa.large_string()},
     r"column 'p_right' of table 'events' is in the multi-output group \['p_left', 'p_right'\] that UDF 'pair' "
     r"computes in one call and holds its type \(string\)"),
])
def test_a_group_member_is_not_made_non_nullable_or_retyped(grouped, alteration, message):
    version, schema = grouped.version, grouped.schema
    with pytest.raises(ColumnError, match=message):
        grouped.alter_columns(alteration)
    assert grouped.version == version and grouped.schema == schema
    grouped.add(events_table(1, start=ROWS))  # add() still works
    assert _backfill(grouped, "p_right").rows_computed == 1


@pytest.mark.parametrize("member", ["p_left", "p_right"])
def test_a_group_members_udf_is_not_revised_alone_and_the_error_names_the_group(grouped, member):
    """Any column of a group is a UDF column (its group's): a UDF revision through it is refused as the group's,
    naming the group -- not "not a UDF column" -- and nothing changes."""

    @gp.udf(data_type=grouped.schema.field(member).type)
    def single(x: int):
        return None

    version, schema = grouped.version, grouped.schema
    with pytest.raises(gp.UDFDefinitionError) as refused:
        grouped.alter_columns({"path": member, "udf": single})
    message = str(refused.value)
    assert f"column '{member}' of table 'events'" in message and "['p_left', 'p_right']" in message, message
    assert "multi-output group" in message and "not a UDF column" not in message, message
    assert grouped.version == version and grouped.schema == schema


@pytest.mark.parametrize(("renamed", "to"), [("p_right", "q"), ("p_left", "q")])
def test_a_group_rename_an_older_version_left_half_done_is_named_by_the_backfill_and_finished_by_the_rerun(
        grouped, renamed, to):
    # What an older version's rename left: the columns renamed in Lance, the metadata naming them not.
    moved = [{"path": renamed, "name": to}]
    if renamed == "p_left":
        moved.append({"path": fingerprint_column("p_left"), "name": fingerprint_column(to)})
    grouped.dataset().alter_columns(*moved)
    with pytest.raises(ColumnError, match=r"'events'.*UDF 'pair' computes the columns.*run that alter_columns again"):
        _backfill(grouped, to)

    grouped.alter_columns({"path": renamed, "rename": to})  # the rerun finishes it
    columns = ["q", "p_right"] if renamed == "p_left" else ["p_left", "q"]
    assert udf_column_info(grouped.schema.field(columns[0]).metadata).outputs == columns
    assert _states(grouped) == {columns[0]: (ROWS, 0, 0)}
    grouped.add(events_table(1, start=ROWS))
    assert _backfill(grouped, to).rows_computed == 1
    t = grouped.to_arrow(["x", *columns]).to_pydict()
    assert t[columns[0]] == [x + 1 for x in t["x"]] and t[columns[1]] == [f"r{x}" for x in t["x"]]
    grouped.dataset().validate()
