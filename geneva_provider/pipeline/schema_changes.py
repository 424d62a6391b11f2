"""Schema changes of a table, built then committed: pyiceberg's ``UpdateSchema`` for UDF columns.

A UDF column never comes alone: its fingerprint column (:mod:`geneva_provider.core.fingerprints`)
is added with it, dropped with it and renamed with it.  A swap of its UDF (``retry_failed`` with a fix)
keeps the column's name, version, inputs and incarnation, so the values computed stay valid; a revision
(``alter_columns`` with a new UDF) records the new UDF's version, so every value computed by an older
one is stale -- still stored and read -- until a backfill computes it again.
:class:`UpdateColumns` gathers such changes and checks each against the schema as changed so far
when it is added, so a bad one fails before anything is committed.  ``commit()`` lands them through
the committer (:mod:`geneva_provider.pipeline.committer`): drops, then additions, then
nullability and type changes, then renames with every metadata change (or the metadata alone) -- each
rebuilt from the latest version on a conflict, and each recognised when it had already landed (the dropped
columns gone, the added ones there with this change's incarnation ids, the renamed ones under their new
names, the metadata in place), so a retried change is never made twice.  A rename is one commit with the
metadata naming its column -- its fingerprint column's owner, its multi-output group's columns -- so a kill
never leaves one without the other; a rename asked again after it landed (a rerun after a kill) finishes it,
as it does one an older version of the package left half done (:func:`left_by_a_rename`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, TypeAlias

from geneva_provider.core.column_names import check_column_name, is_internal_column, user_columns
from geneva_provider.core.column_paths import missing_paths, path_root, path_type, reads_column
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.fingerprints import (
    FINGERPRINT_OF,
    fingerprint_column,
    fingerprint_field,
    holds_fingerprints_of,
    left_by_a_rename,
)
from geneva_provider.core.fragments import column_field
from geneva_provider.core.functions.computed import Computed
from geneva_provider.core.functions.udf import (
    META_COLUMN_UID,
    META_NAME,
    META_OUTPUT_OF,
    META_OUTPUTS,
    META_VERSION,
    UDF,
    UnpackedUDF,
    lead_column,
    udf_column_info,
)
from geneva_provider.core.views.meta import META_QUERY
from geneva_provider.pipeline.committer import OWN_COMMIT_PREFIX, Attempt, CommitPolicy, commit, conflict_of
from geneva_provider.pipeline.schema_edit import SchemaField, edited_schema

if TYPE_CHECKING:
    import pyarrow as pa

    from geneva_provider.core.functions.udf import UdfColumnInfo
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.core.refs import TableRef

log = logging.getLogger(__name__)
_UID = META_COLUMN_UID.encode()
RENAMED_FROM = "geneva::renamed_from"  # a renamed column's name before its last rename: a rerun knows it landed
_Landed: TypeAlias = "Callable[[Dataset], int | None]"
_Apply: TypeAlias = "Callable[[Dataset], int]"


@dataclass
class _Addition:
    """Fields added in one Lance commit, and how an error names them."""

    fields: list[pa.Field] = field(default_factory=list)
    described: list[str] = field(default_factory=list)  # "column 'y' (double)": what cannot be stored


class UpdateColumns:
    """A change of one table's columns: add UDF columns (with their fingerprint columns) or plain fields,
    drop columns (with theirs), swap or revise a UDF column's code, rename columns or change their
    nullability or type, set table metadata; then :meth:`commit`.

    ``subject`` names the change in errors ("add_columns on table 'events'"); ``policy`` bounds the
    commit's retries of conflicts (by default the package's).
    """

    def __init__(self, table: TableRef, *, subject: str | None = None, policy: CommitPolicy | None = None,
                 read: Dataset | None = None) -> None:
        self.table = table
        self.subject = subject or f"schema change of table '{table.name}'"
        self.policy = policy
        ds = read if read is not None else table.dataset()  # ``read``: the table as the caller just opened it
        self._read = ds  # the version the changes are built on (a rename names its column's field id in it)
        self._schema: pa.Schema = ds.schema  # as the changes so far leave it
        self._existing = set(ds.schema.names)  # what a UDF added without inputs reads: the table's columns
        self._drops: list[str] = []
        self._addition = _Addition()
        self._field_metadata: dict[str, tuple[str, dict[str, str]]] = {}  # column -> (its incarnation, metadata)
        self._table_metadata: dict[str, str | None] = {}
        self._alterations: list[dict[str, Any]] = []  # Lance's alter_columns: path (as read), nullable, data_type
        self._renames: dict[str, tuple[int | None, str]] = {}  # a column as read -> (its field id, its new name)
        self._finished: dict[str, str] = {}  # a rename that landed before (a rerun): its former name -> its name
        self._done: set[str] = set()  # the steps of commit() that landed

    # ------------------------------------------------------------------ building
    def add_udf_column(self, column: str, fn: UDF, inputs: Sequence[str] | None = None) -> Self:
        """Adds ``column`` computed by ``fn`` from ``inputs`` (default: the UDF's own), with its fingerprint column.

        A fingerprint column of that name left behind by a drop outside the package is dropped first
        (its fingerprints are of old values); one the package did not make is refused.
        """
        if fn.multi_output:
            raise InvalidArgumentError(
                f"{self.subject}: UDF '{fn.name}' computes the columns {UnpackedUDF(fn).columns} (it returns "
                f"Columns[...]); add it as add_columns({fn.name}), not under the one column name '{column}'")
        return self._add_udf(column, [column], fn, inputs)

    def add_computed_column(self, column: str, spec: Computed) -> Self:
        """Adds ``column`` kept equal to the SQL expression of ``spec`` over its row (``computed("a * 2")``): a UDF
        column bound against the schema as changed so far, so it may read a column added before it."""
        return self.add_udf_column(column, spec.bind(column, self._schema, self.subject))

    def add_udf_group(self, unpacked: UnpackedUDF, inputs: Sequence[str] | None = None) -> Self:
        """Adds the columns of a multi-output UDF, one per field of its struct, with one fingerprint column.

        The group's first column (its lead) records the UDF; the fingerprint column is the lead's.  A
        group that already holds the identical UDF is left as it is; any other column of those names is
        ColumnError.
        """
        columns = unpacked.columns
        there = [c for c in columns if c in self._schema.names]
        if there and there != columns:
            raise ColumnError(f"{self.subject}: UDF '{unpacked.udf.name}' computes the columns {columns}, but table "
                              f"'{self.table.name}' already has {there}; drop them (or choose another prefix) first")
        return self._add_udf(columns[0], columns, unpacked.unpacked, inputs)

    def _add_udf(self, column: str, columns: list[str], fn: UDF, inputs: Sequence[str] | None) -> Self:
        """Adds the UDF columns ``columns`` (``column``, their lead, first) and the lead's fingerprint column."""
        name, names = self.table.name, self._schema.names
        named = list(inputs) if inputs is not None else fn.input_columns
        if named is not None and fn.input_columns is not None and len(named) != len(fn.input_columns):
            raise InvalidArgumentError(
                f"column '{column}': UDF '{fn.name}' takes {len(fn.input_columns)} inputs, got {named}")
        if column in names:
            self._check_redeclared(column, fn, named, columns)
            log.info("%s: column '%s' of table '%s' already holds UDF '%s' version %s; left as it is", self.subject,
                     column, name, fn.name, fn.version)
            return self
        for c in columns:
            check_column_name(c, self.subject)
        inputs = named if named is not None else sorted(self._existing)
        missing = [c for c in inputs if path_root(self._existing, c) not in self._existing] or \
            missing_paths(self._schema, inputs)
        if missing:
            raise ColumnError(f"column '{column}': UDF '{fn.name}' reads {missing}, not found in table '{name}' "
                              f"(columns: {user_columns(names)})")
        self._check_input_types(column, fn, inputs)
        try:
            fields = fn.group_fields(columns, inputs) if fn.multi_output else [fn.field(column, inputs)]
        except UDFDefinitionError as exc:
            raise UDFDefinitionError(f"column '{column}' of table '{name}': {exc}") from None
        fp = fingerprint_column(column)
        if fp in names and not holds_fingerprints_of(self._schema.field(fp), column):
            raise ColumnError(
                f"{self.subject}: column '{column}' needs the column name '{fp}' for its fingerprints, but table "
                f"'{name}' already has a column '{fp}' that the package did not make: rename or drop that column first")
        if fp in names:  # left behind by a drop outside the package: its fingerprints are of old values
            self._drop([fp])
        self._add([*fields, fingerprint_field(column)], ", ".join(f"column '{f.name}' ({f.type})" for f in fields))
        self._existing.update(columns)  # later columns of the same change may read them
        return self

    def _check_redeclared(self, column: str, fn: UDF, inputs: list[str] | None, columns: list[str]) -> None:
        """Passes when ``column`` already holds ``fn``: a re-declaration (a notebook cell run again) changes nothing.

        Held means what decides whether the column's values are valid -- the UDF's version (a hash of
        what it computes), its type and its inputs (``inputs`` None: the table's columns, as recorded) --
        and the settings the column records for its backfills (the error policy's skip limits, the
        resources).  Anything else is ColumnError naming the column and what differs: redefining a
        column is dropping it (and its values) first.
        """
        where = f"column '{column}' already exists in table '{self.table.name}'"
        current = self._schema.field(column)
        held = udf_column_info(current.metadata)
        if held is None:
            raise ColumnError(f"{self.subject}: {where} and is not a UDF column")
        limits = fn.on_error.skip_limits if fn.on_error.can_skip else (None, None)
        differs = [what for what, same in (
            (f"version {fn.version} (UDF '{fn.name}'), not {held.version} (UDF '{held.name}')",
             fn.version == held.version),
            (f"type {fn.data_type}, not {current.type}", fn.multi_output or fn.data_type == current.type),
            (f"columns {columns}, not {held.columns(column)}", columns == held.columns(column)),
            (f"input columns {inputs}, not {held.input_columns}", inputs is None or inputs == held.input_columns),
            (f"skip limits (max_rows, max_fraction) {limits}, not {(held.max_failed_rows, held.max_failed_fraction)}",
             limits == (held.max_failed_rows, held.max_failed_fraction)),
            (f"resources {fn.resources}, not {held.resources}", fn.resources == held.resources),
            (f"backfill sizes {fn.job_defaults}, not {held.job_defaults}", fn.job_defaults == held.job_defaults),
            (f"auto_backfill {fn.auto_backfill}, not {held.auto_backfill}", fn.auto_backfill == held.auto_backfill),
        ) if not same]
        if differs:
            raise ColumnError(f"{self.subject}: {where}, computed by another UDF: {'; '.join(differs)}. Drop the "
                              "column to redefine it (its values go with it)")

    def add_fields(self, fields: Sequence[pa.Field]) -> Self:
        """Adds plain nullable fields as they are (a view's columns, a fingerprint column an older table lacks)."""
        taken = [f.name for f in fields if f.name in self._schema.names]
        if taken:
            raise ColumnError(f"{self.subject}: column(s) {taken} already exist in table '{self.table.name}'")
        for f in fields:
            self._add([f], f"column '{f.name}' ({f.type})")
        return self

    def drop_columns(self, columns: Sequence[str]) -> Self:
        """Drops ``columns`` and their fingerprint columns.

        Refused, changing nothing: the package's own columns (a fingerprint goes with its column),
        every column at once, and a column a remaining UDF column reads (drop both together).
        """
        name, names = self.table.name, self._schema.names
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise ColumnError(f"cannot drop {unknown}: not in table '{name}' (columns: {user_columns(names)})")
        internal = [c for c in columns if is_internal_column(c)]
        if internal:
            raise ColumnError(f"cannot drop {internal} from table '{name}': the package keeps them (a "
                              "fingerprint column goes when its UDF column is dropped)")
        self._check_whole_groups(columns)
        dropped = {*columns, *(fingerprint_column(c) for c in columns if fingerprint_column(c) in names)}
        kept = [n for n in names if n not in dropped]
        if not [n for n in kept if not is_internal_column(n)]:
            raise InvalidArgumentError(f"{self.subject}: cannot drop every column ({sorted(columns)}); drop the "
                                       "table instead")
        in_view = META_QUERY.encode() in (self._schema.metadata or {})  # a view's UDFs read its source's columns
        for f in [] if in_view else self._schema:
            info = udf_column_info(f.metadata) if f.name in kept else None
            paths = reads_column(info.input_columns or [], names, dropped) if info is not None else []
            reads = sorted({path_root(names, p) for p in paths})
            if reads:
                raise ColumnError(f"cannot drop {reads} from table '{name}': UDF column '{f.name}' reads "
                                  f"them; drop '{f.name}' too (in the same call) or first")
        self._drop(sorted(dropped, key=names.index))
        return self

    def _check_whole_groups(self, columns: Sequence[str]) -> None:
        """ColumnError unless ``columns`` names every column of each multi-output group it names any of.

        A group's columns are computed by one call and judged valid by one fingerprint, as the
        reference's ``Columns[T]`` columns "must be dropped together": dropping a part would leave columns
        that no UDF computes, or a UDF whose outputs have no column.
        """
        for c in columns:
            lead = lead_column(self._schema, c)
            info = udf_column_info(self._schema.field(lead).metadata)
            group = info.columns(lead) if info is not None else [c]
            kept = [g for g in group if g not in columns]
            if kept:
                raise ColumnError(f"cannot drop {[g for g in group if g in columns]} from table '{self.table.name}' "
                                  f"alone: UDF '{info.name if info else '?'}' computes the columns {group} together "
                                  f"in one call; drop all of them in one call (the rest: {kept})")

    def swap_udf(self, column: str, fixed: UDF) -> Self:
        """Stores ``fixed`` as ``column``'s code, keeping its name, version, inputs and incarnation.

        The type and the number of inputs must match: the stored values and their fingerprints stay
        as they are, so only rows without a valid value (the failed ones) are computed by the fix.
        """
        info, metadata = self._check_swap(column, fixed, "fixed", None)
        kept = {k: getattr(info, a) for k, a in ((META_NAME, "name"), (META_VERSION, "version"),
                                                 (META_COLUMN_UID, "column_uid"))}
        self._field_metadata[column] = (info.column_uid, {**metadata, **kept})
        return self

    def revise_udf(self, column: str, fn: UDF | Computed, inputs: Sequence[str] | None = None) -> Self:
        """Stores ``fn`` as ``column``'s UDF with its own name and version, reading ``inputs`` (default: the
        columns the old UDF read); the column keeps its incarnation, its values and their fingerprints.

        The fingerprints are seeded with the UDF's version, so every value an older version computed is
        stale from now on -- still stored and read -- and the next backfill (or one whose ``where`` selects
        it) computes it again; a UDF of the same version changes nothing the backfill sees.  The type must be
        the column's and the inputs must exist.  A new expression (``computed("a * 3")``) reads the columns it names.
        """
        if isinstance(fn, Computed):
            fn = fn.bind(column, self._schema, self.subject)
            inputs = fn.input_columns
        info, metadata = self._check_swap(column, fn, "new", inputs)
        self._field_metadata[column] = (info.column_uid, {**metadata, META_COLUMN_UID: info.column_uid})
        return self

    def alter_column(self, path: str, *, rename: str | None = None, nullable: bool | None = None,
                     data_type: pa.DataType | None = None) -> Self:
        """Renames a top-level column (a UDF column with its fingerprint column; a column of a multi-output group
        with its group), or changes its nullability or type (with Lance's ``alter_columns``): the values stay.

        A rename lands in one commit with the metadata that names the column (:meth:`commit`), and the same
        rename asked again once it landed (a rerun after a kill) finishes it if need be and changes nothing else.
        Refused, changing nothing: the package's own columns, a name that exists, renaming a column a UDF
        column reads, renaming a view's column, making a UDF column (or any column of a group) non-nullable (its
        rows are NULL until computed) and changing a UDF column's type (the UDF's type decides it).
        """
        import pyarrow as pa

        name, names = self.table.name, self._schema.names
        if path not in names and rename is not None and self._landed_rename(path, rename):
            log.info("%s: column '%s' was already renamed to '%s'; finishing that rename", self.subject, path, rename)
            self._finished[path] = rename
            path, rename = rename, None
        where = f"{self.subject}: column '{path}' of table '{name}'"
        if path not in names:
            raise ColumnError(f"{self.subject}: column '{path}' not found in table '{name}' "
                              f"(columns: {user_columns(names)})")
        if is_internal_column(path):
            raise ColumnError(f"{where} is the package's own (it follows its UDF column)")
        current = self._schema.field(path)
        lead = lead_column(self._schema, path)
        info = udf_column_info(self._schema.field(lead).metadata) if lead in names else None
        group = info.columns(lead) if info is not None and info.outputs else None
        computed = f"{where} is in the multi-output group {group} that UDF '{info.name}' computes in one call" \
            if group and info else None
        change: dict[str, Any] = {}
        if data_type is not None:
            if not isinstance(data_type, pa.DataType):
                raise InvalidArgumentError(f"{where}: data_type must be a pyarrow DataType, got {data_type!r}")
            if info is not None:
                raise ColumnError(f"{computed or f'{where} is computed by UDF {info.name!r}'} and holds its type "
                                  f"({current.type}); drop it and add a UDF of the new type")
            if data_type != current.type:
                change["data_type"] = data_type
        if nullable is not None:
            if not isinstance(nullable, bool):
                raise InvalidArgumentError(f"{where}: nullable must be True or False, got {nullable!r}")
            if info is not None and not nullable:
                raise ColumnError(f"{computed or f'{where} is a UDF column'}: it must stay nullable (its rows are NULL "
                                  "until computed)")
            if nullable != current.nullable:
                change["nullable"] = nullable
        if rename is not None:
            self._check_rename(path, rename, path == lead and info is not None)
        elif data_type is None and nullable is None and path not in self._finished.values():
            raise InvalidArgumentError(f"{where}: nothing to alter (give rename, nullable or data_type)")
        if change:
            self._alterations.append({"path": self._as_read(path), **change})
            field = current.with_nullable(change.get("nullable", current.nullable))
            self._schema = self._schema.set(self._schema.get_field_index(path),
                                            field.with_type(change.get("data_type", field.type)))
        if rename is not None:
            self._rename(path, rename)
        return self

    def _landed_rename(self, path: str, rename: str) -> bool:
        """True when column ``rename`` was ``path`` before a rename that landed: the rename records it, or an older
        version of the package left it half done -- ``rename``'s fingerprint column still owned by ``path``, or
        its multi-output group still naming ``path`` where ``rename`` now is."""
        import json

        if rename not in self._schema.names:
            return False
        metadata = self._schema.field(rename).metadata or {}
        if metadata.get(RENAMED_FROM.encode()) == path.encode() or left_by_a_rename(self._schema, rename) == path:
            return True
        lead = metadata.get(META_OUTPUT_OF.encode())
        if lead is not None and lead.decode() in self._schema.names:  # a member: its lead still lists ``path``
            metadata = self._schema.field(lead.decode()).metadata or {}
        outputs = json.loads(metadata.get(META_OUTPUTS.encode(), b"[]"))
        return path in outputs and rename not in outputs

    def _check_rename(self, path: str, rename: str, is_udf: bool) -> None:
        name, names = self.table.name, self._schema.names
        check_column_name(rename, self.subject)
        taken = [c for c in (rename, fingerprint_column(rename) if is_udf else None) if c in names]
        if taken:
            raise ColumnError(f"{self.subject}: cannot rename column '{path}' of table '{name}' to '{rename}': "
                              f"column '{taken[0]}' exists")
        if META_QUERY.encode() in (self._schema.metadata or {}):
            raise ColumnError(f"{self.subject}: cannot rename column '{path}' of view '{name}': a view's columns "
                              "are named by its query")
        readers = [f.name for f in self._schema if (i := udf_column_info(f.metadata)) is not None
                   and reads_column(i.input_columns or [], names, [path])]
        if readers:
            raise ColumnError(f"{self.subject}: cannot rename column '{path}' of table '{name}': UDF column(s) "
                              f"{readers} read it")

    def _as_read(self, column: str) -> str:
        """The name ``column`` (as the changes so far name it) had when this change read the table."""
        return next((was for was, (_, now) in self._renames.items() if now == column), column)

    def _rename(self, path: str, rename: str) -> None:
        """Renames in the schema as changed so far; a UDF column's fingerprint column, a pending swap and the
        metadata naming the column (its group's, its fingerprint column's owner) follow it."""
        import pyarrow as pa

        moves = {path: rename}
        fp = fingerprint_column(path)
        if fp in self._schema.names and holds_fingerprints_of(self._schema.field(fp), path):
            moves[fp] = fingerprint_column(rename)
        for old, new in moves.items():
            was = self._as_read(old)
            field_id = column_field(self._read, was).id() if was in self._read.schema.names else None
            self._renames[was] = (field_id, new)
        if path in self._field_metadata:
            self._field_metadata[rename] = self._field_metadata.pop(path)
        fields = []
        for f in self._schema:
            metadata = {k.decode(): v for k, v in (f.metadata or {}).items()}
            followed = followed_metadata(metadata, moves)
            f = f.with_metadata(followed) if followed is not None else f
            fields.append(f.with_name(moves.get(f.name, f.name)))
        self._schema = pa.schema(fields, self._schema.metadata)
        self._existing = (self._existing - {path}) | {rename}

    def set_table_metadata(self, values: Mapping[str, str | None]) -> Self:
        """Sets the table's (schema) metadata ``values``; None removes a key."""
        self._table_metadata.update(values)
        return self

    def _check_swap(self, column: str, fn: UDF, word: str, inputs: Sequence[str] | None
                    ) -> tuple[UdfColumnInfo, dict[str, str]]:
        """The column's UDF, and the metadata that records ``fn`` (the ``word`` UDF) on it reading ``inputs``
        (None: what it reads now); UDFDefinitionError / ColumnError naming the column when ``fn`` cannot be."""
        name = self.table.name
        if column not in self._schema.names:
            raise ColumnError(f"{self.subject}: column '{column}' not found in table '{name}' "
                              f"(columns: {user_columns(self._schema.names)})")
        f = self._schema.field(column)
        lead = lead_column(self._schema, column)  # a group's member: its UDF is recorded on the group's first column
        info = udf_column_info(self._schema.field(lead).metadata) if lead in self._schema.names else None
        if info is None:
            raise ColumnError(f"{self.subject}: column '{column}' of table '{name}' is not a UDF column")
        if not isinstance(fn, UDF):
            raise UDFDefinitionError(f"column '{column}' of table '{name}': udf must be a @udf function, got {fn!r}")
        if fn.multi_output or info.outputs:
            group = f" (in the multi-output group {info.columns(lead)} of UDF '{info.name}')" if info.outputs else ""
            raise UDFDefinitionError(f"column '{column}' of table '{name}'{group}: a {word} UDF cannot be a "
                                     "multi-output UDF or replace one of a multi-output group; rerun the backfill of "
                                     "the group, or drop the group and add it again")
        if fn.data_type != f.type:
            raise UDFDefinitionError(f"column '{column}' of table '{name}' holds {f.type}; the {word} UDF "
                                     f"'{fn.name}' returns {fn.data_type}")
        if inputs is None:
            inputs = info.input_columns
        else:
            self._check_inputs(column, fn, list(inputs))
        if fn.input_columns is not None and inputs is not None and len(fn.input_columns) != len(inputs):
            raise UDFDefinitionError(f"column '{column}' of table '{name}' reads {inputs}; the {word} UDF "
                                     f"'{fn.name}' takes {len(fn.input_columns)} inputs")
        self._check_input_types(column, fn, inputs or [])
        try:
            metadata = fn.to_field_metadata(inputs)
        except UDFDefinitionError as exc:
            raise UDFDefinitionError(f"column '{column}' of table '{name}': {exc}") from None
        return info, metadata

    def _check_input_types(self, column: str, fn: UDF, inputs: Sequence[str]) -> None:
        """UDFDefinitionError before anything changes when a parameter annotated ``np.ndarray`` / ``list[...]``
        would be given a column that is not a list (a view's inputs are its source's: not checked here)."""
        if META_QUERY.encode() not in (self._schema.metadata or {}):
            fn.check_input_types([path_type(self._schema, c) for c in inputs], inputs,
                                 f"column '{column}' of table '{self.table.name}'")

    def _check_inputs(self, column: str, fn: UDF, inputs: list[str]) -> None:
        name = self.table.name
        if not inputs or not all(isinstance(c, str) for c in inputs):
            raise InvalidArgumentError(f"{self.subject}: column '{column}': input_columns must be a non-empty list "
                                       f"of column names, got {inputs!r}")
        in_view = META_QUERY.encode() in (self._schema.metadata or {})  # a view's UDFs read its source's columns
        missing = [] if in_view else [c for c in inputs if is_internal_column(c)] or missing_paths(self._schema, inputs)
        if missing:
            raise ColumnError(f"column '{column}': UDF '{fn.name}' reads {missing}, not found in table '{name}' "
                              f"(columns: {user_columns(self._schema.names)})")
        if column in inputs:
            raise UDFDefinitionError(f"column '{column}' of table '{name}': UDF '{fn.name}' cannot read the column "
                                     "it computes")

    def _drop(self, columns: list[str]) -> None:
        self._drops += [c for c in columns if c not in self._drops]
        for c in columns:
            if c in self._schema.names:
                self._schema = self._schema.remove(self._schema.get_field_index(c))

    def _add(self, fields: list[pa.Field], described: str) -> None:
        self._addition.fields += fields
        self._addition.described.append(described)
        for f in fields:
            self._schema = self._schema.append(f)

    # ------------------------------------------------------------------ committing
    def commit(self) -> int:
        """Lands the changes -- drops, additions, nullability and type changes, then the renames with every metadata
        change (or the metadata changes alone): one commit each -- and returns the table's version.

        A rename is one commit with the metadata that names the column (its fingerprint column's owner, its group's
        columns, a new UDF): a kill leaves it all or nothing, never a fingerprint column owned by a name that is
        gone (:mod:`geneva_provider.pipeline.schema_edit`).
        """
        steps: list[tuple[str, _Landed, _Apply]] = []
        if self._drops:
            steps.append((f"drop of column(s) {self._drops}", self._landed_drops, self._apply_drops))
        if self._addition.fields:
            steps.append((f"addition of column(s) {[f.name for f in self._addition.fields]}", self._landed_addition,
                          self._apply_addition))
        if self._alterations:
            steps.append((f"alteration of column(s) {[a['path'] for a in self._alterations]}",
                          self._landed_alterations, self._apply_alterations))
        if self._renames or self._finished:
            steps.append((f"rename of column(s) {self._moves()}", self._landed_metadata, self._apply_renames))
        elif self._field_metadata or self._table_metadata:
            steps.append((f"metadata change of column(s) {list(self._field_metadata)}", self._landed_metadata,
                          self._apply_metadata))
        version = None
        for what, landed, apply in steps:
            if what not in self._done:  # a commit() called again after a failed step does not redo the others
                version = self._commit(what, landed, apply)
                self._done.add(what)
        if version is None and not self._done:  # nothing to change (a cell run again): the version it was judged at
            return self._read.version
        return version if version is not None else self.table.dataset().version

    def _commit(self, what: str, landed: _Landed, apply: _Apply) -> int:
        def attempt(a: Attempt) -> int:
            return apply(a.latest if a.latest is not None else self.table.dataset())  # look_first: the latest

        return commit(self.table, what, attempt, landed=landed, policy=self.policy, reapplies=True,
                      look_first=True).value

    def _landed_drops(self, ds: Dataset) -> int | None:
        return ds.version if not set(self._drops) & set(ds.schema.names) else None

    def _apply_drops(self, ds: Dataset) -> int:
        ds.drop_columns([c for c in self._drops if c in ds.schema.names])
        return ds.version  # the method moves ``ds`` to the version it committed

    def _landed_addition(self, ds: Dataset) -> int | None:
        names = ds.schema.names
        for f in self._addition.fields:
            if f.name not in names:
                return None
            uid = (f.metadata or {}).get(_UID)
            if uid is not None and (ds.schema.field(f.name).metadata or {}).get(_UID) != uid:
                return None
        return ds.version

    def _apply_addition(self, ds: Dataset) -> int:
        taken = [f.name for f in self._addition.fields if f.name in ds.schema.names]
        if taken:  # another writer added a column of that name meanwhile
            raise ColumnError(f"column '{taken[0]}' already exists in table '{self.table.name}'")
        try:
            ds.add_columns(list(self._addition.fields))
        except (OSError, ValueError, TypeError) as exc:
            if conflict_of(exc) is not None:
                raise
            raise UDFDefinitionError(f"{self.subject}: {', '.join(self._addition.described)} cannot be stored by "
                                     f"Lance: {lance_reason(exc)}") from None
        return ds.version

    def _landed_alterations(self, ds: Dataset) -> int | None:
        names = ds.schema.names
        for alt in self._alterations:
            if alt["path"] not in names:
                return None
            f = ds.schema.field(alt["path"])
            if f.nullable != alt.get("nullable", f.nullable) or f.type != alt.get("data_type", f.type):
                return None
        return ds.version

    def _apply_alterations(self, ds: Dataset) -> int:
        try:
            alterations: list[Any] = [dict(a) for a in self._alterations]  # Lance's AlterColumn dicts
            ds.alter_columns(*alterations)
        except (OSError, ValueError, TypeError) as exc:
            if conflict_of(exc) is not None:
                raise
            raise InvalidArgumentError(f"{self.subject}: {lance_reason(exc)}") from None
        return ds.version  # the method moves ``ds`` to the version it committed

    def _moves(self) -> dict[str, str]:
        """Every name this change moves: a column as read (or as a rename that landed before left it) -> its name."""
        return {**self._finished, **{was: now for was, (_, now) in self._renames.items()}}

    def _landed_metadata(self, ds: Dataset) -> int | None:
        names, moves = ds.schema.names, self._moves()
        for was, (field_id, now) in self._renames.items():
            if now not in names or was in names or (field_id is not None and column_field(ds, now).id() != field_id):
                return None
        if any(followed_metadata({k.decode(): v for k, v in (f.metadata or {}).items()}, moves) is not None
               for f in ds.schema):
            return None
        table_md = ds.schema.metadata or {}
        if any(table_md.get(k.encode()) != (v.encode() if v is not None else None)
               for k, v in self._table_metadata.items()):
            return None
        for column, (_, metadata) in self._field_metadata.items():
            held = {k: v for k, v in (ds.schema.field(column).metadata or {}).items() if k != RENAMED_FROM.encode()} \
                if column in names else None
            if held != {k.encode(): v.encode() for k, v in metadata.items()}:
                return None
        return ds.version

    def _check_swapped(self, ds: Dataset, column: str, incarnation: str) -> None:
        """ColumnError, nothing changed, when ``column`` (as ``ds`` names it) is no longer the UDF column swapped."""
        info = udf_column_info(ds.schema.field(column).metadata) if column in ds.schema.names else None
        if info is None or info.column_uid != incarnation:
            raise ColumnError(f"column '{column}' of table '{self.table.name}' was dropped or replaced while "
                              "its UDF was being swapped; nothing was changed")

    def _apply_renames(self, ds: Dataset) -> int:
        """One ``Project`` commit: the renamed columns under their names, every metadata naming them following,
        the swapped UDFs' metadata, the table metadata; built on ``ds`` (the latest version)."""
        import lance

        names, moves = ds.schema.names, self._moves()
        for was, (field_id, now) in self._renames.items():
            if was not in names or (field_id is not None and column_field(ds, was).id() != field_id):
                raise ColumnError(f"{self.subject}: column '{was}' of table '{self.table.name}' was dropped, renamed "
                                  f"or replaced while it was being renamed to '{now}'; nothing was changed")
            if now in names:  # another writer added a column of that name meanwhile
                raise ColumnError(f"{self.subject}: cannot rename column '{was}' of table '{self.table.name}' to "
                                  f"'{now}': column '{now}' exists")
        swaps = {}
        for column, (incarnation, metadata) in self._field_metadata.items():
            self._check_swapped(ds, self._as_read(column), incarnation)
            swaps[column] = {k: v.encode() for k, v in metadata.items()}

        def edit(field: SchemaField) -> tuple[str, dict[str, bytes]] | None:
            if field.parent_id != -1:
                return None
            name = moves[field.name] if field.name in self._renames else field.name
            metadata = dict(swaps.get(name, field.metadata))
            metadata = followed_metadata(metadata, moves) or metadata
            if field.name in self._renames:
                metadata[RENAMED_FROM] = field.name.encode()  # a rerun of this rename knows it landed
            return None if (name, metadata) == (field.name, field.metadata) else (name, metadata)

        op = lance.LanceOperation.Project(edited_schema(ds, edit, self._table_metadata), preserves_nullability=True)
        return lance.LanceDataset.commit(self.table.uri, op, read_version=ds.version,
                                         storage_options=self.table.storage_options,
                                         commit_message=f"{OWN_COMMIT_PREFIX}schema change {uuid.uuid4().hex}").version

    def _apply_metadata(self, ds: Dataset) -> int:
        import lance

        op = lance.LanceOperation
        updates = {}
        for column, (incarnation, metadata) in self._field_metadata.items():
            self._check_swapped(ds, column, incarnation)
            values: dict[str, str | None] = dict(metadata)
            updates[column_field(ds, column).id()] = op.UpdateMap(values, replace=True)
        config = op.UpdateConfig(field_metadata_updates=updates or None,
                                 schema_metadata_updates=op.UpdateMap(self._table_metadata)
                                 if self._table_metadata else None)
        return lance.LanceDataset.commit(self.table.uri, config, read_version=ds.version,
                                         storage_options=self.table.storage_options,
                                         commit_message=f"{OWN_COMMIT_PREFIX}schema change {uuid.uuid4().hex}").version


def followed_metadata(metadata: Mapping[str, bytes], moves: Mapping[str, str]) -> dict[str, bytes] | None:
    """A field's metadata with every column name the package records in it -- a fingerprint column's owner, a
    group's columns, a group member's lead -- moved as ``moves`` renames them; None when none is moved."""
    import json

    followed = dict(metadata)
    for key in (FINGERPRINT_OF, META_OUTPUT_OF):
        value = metadata.get(key)
        if value is not None and value.decode() in moves:
            followed[key] = moves[value.decode()].encode()
    outputs = metadata.get(META_OUTPUTS)
    if outputs is not None:
        columns = json.loads(outputs)
        if any(c in moves for c in columns):
            followed[META_OUTPUTS] = json.dumps([moves.get(c, c) for c in columns]).encode()
    return followed if followed != dict(metadata) else None
