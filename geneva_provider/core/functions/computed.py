"""``computed("a * 2 + b")``: a maintained SQL computed column, a UDF whose function is a SQL expression (core).

The Lance Namespace spec's ``AddColumnsEntry.computed`` declares a column whose values are a SQL expression
over its row, *kept* valid -- unlike Lance's own ``add_columns({"c": "a * 2"})``, which computes the values
once.  Here it is one more kind of user function on the UDF seam, so everything a UDF column has it has too:
the column is added all-NULL, a backfill fills it (in-process, on Spark, through the Airflow operators),
appended rows are filled by the next backfill and rows whose inputs changed are recomputed (fingerprints).

* :func:`computed` is what the user writes; it checks the expression alone (a quote left open, a function
  whose value is not a function of the row: ``random()``, ``now()``, an aggregate) and returns a
  :class:`Computed` declaration, since the column's inputs and type depend on the table;
* :meth:`Computed.bind` makes it a UDF against a table's schema: its inputs are the table columns the
  expression names (a tokenizer that knows Lance's string literals and backquoted identifiers), its type
  that of the expression evaluated over an empty batch of the table's columns (or ``data_type=``), its
  version a hash of the normalized expression and the type -- a new expression is a new version, so every
  value computed by the old one is stale;
* :class:`SqlExpression` is the UDF's (picklable) function: a batch goes into an in-memory Lance dataset and
  is read back with the expression as its one column, vectorised by Lance's DataFusion (no Python per row).
  Measured here against ``LanceDataset.sql`` on 1k / 65k / 1M rows: 1.4 / 3.6 / 165 ms against 1.9 / 4.8 /
  167 ms, and ``sql`` returned a 65k-row batch's rows out of order, so the scan projection it is.

The expression is stored with the column's UDF in its field metadata (``geneva::udf::computed``), and
``Table.udf_columns()`` lists it.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa

from geneva_provider.core.column_names import user_columns
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.functions.udf import META_COMPUTED, UDF, UDFKind

__all__ = ["Computed", "SqlExpression", "computed", "referenced_columns", "tokens"]

# Functions whose value is not a function of the row: a value recomputed later would differ for the same inputs.
# SQL's niladic ones are written without parentheses too (``current_date``); the others only as calls, so a
# column (or a struct field) named ``now`` is still a column.
NILADIC = frozenset({"current_date", "current_time", "current_timestamp", "localtime", "localtimestamp"})
VOLATILE = NILADIC | frozenset({
    "random", "rand", "uuid", "gen_random_uuid", "random_uuid", "now", "today", "clock_timestamp",
    "statement_timestamp", "transaction_timestamp", "sysdate",
})
# Functions whose value depends on other rows (of whichever batch a task computes): not a per-row value.
ACROSS_ROWS = frozenset({
    "over", "count", "sum", "avg", "mean", "min", "max", "median", "stddev", "stddev_pop", "stddev_samp",
    "variance", "var_pop", "var_samp", "array_agg", "string_agg", "first_value", "last_value", "nth_value",
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead", "approx_distinct",
    "approx_median", "approx_percentile_cont", "bit_and", "bit_or", "bool_and", "bool_or",
})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>'(?:[^']|'')*'|"(?:[^"]|"")*")
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<symbol><=|>=|<>|!=|\|\||::|[-+*/%()<>=,.\[\]:!|&^~])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    """One lexical token of an expression: its kind (``string``, ``quoted``, ``name``, ``number``, ``symbol``)
    and text (a backquoted identifier's text unquoted)."""

    kind: str
    text: str


def tokens(expression: str) -> list[Token]:
    """The tokens of ``expression`` (whitespace dropped); ValueError naming the first character no token starts
    with -- a string literal or a backquoted identifier left open."""
    out, pos = [], 0
    while pos < len(expression):
        m = _TOKEN.match(expression, pos)
        if m is None:
            opened = expression[pos]
            what = "a string literal" if opened in "'\"" else "a backquoted identifier" if opened == "`" else None
            raise ValueError(f"{what} opened at character {pos} is never closed" if what else
                             f"unexpected character {opened!r} at character {pos}")
        kind = m.lastgroup or ""
        if kind != "space":
            text = m.group()
            out.append(Token(kind, text[1:-1].replace("``", "`") if kind == "quoted" else text))
        pos = m.end()
    return out


def normalized(toks: list[Token]) -> str:
    """The expression as its tokens, one space apart: what its version hashes (``a*2`` is ``a * 2``)."""
    return " ".join(f"`{t.text.replace('`', '``')}`" if t.kind == "quoted" else
                    t.text for t in toks)


def referenced_columns(toks: list[Token], columns: list[str]) -> list[str]:
    """The ``columns`` the expression reads, in the order it first names them: a name or backquoted identifier
    that is not a function's name (followed by ``(``) nor a struct field (after ``.``)."""
    found: list[str] = []
    for i, t in enumerate(toks):
        if t.kind not in ("name", "quoted"):
            continue
        after_dot = i > 0 and toks[i - 1].text == "." and toks[i - 1].kind == "symbol"
        called = i + 1 < len(toks) and toks[i + 1].text == "(" and toks[i + 1].kind == "symbol"
        if after_dot or called or t.text not in columns or t.text in found:
            continue
        found.append(t.text)
    return found


@dataclass(frozen=True)
class SqlExpression:
    """A computed column's function: ``expression`` over a RecordBatch of its input columns, as one array
    (cast to ``data_type`` when given).  Picklable by reference (this module is on every worker)."""

    expression: str
    data_type: pa.DataType | None = None

    def __call__(self, batch: pa.RecordBatch) -> pa.Array:
        import lance

        ds = lance.write_dataset(batch, f"memory://computed-{uuid.uuid4().hex}")
        values = ds.to_table(columns={"value": self.expression}).column("value").combine_chunks()
        if len(values) != batch.num_rows:
            raise ValueError(f"the expression {self.expression!r} gave {len(values)} values for {batch.num_rows} "
                             "rows: it is not a value of each row")
        if self.data_type is not None and values.type != self.data_type:
            values = values.cast(self.data_type, safe=True)
        return values


@dataclass(frozen=True)
class Computed:
    """A maintained SQL computed column as declared (``computed("a * 2 + b")``), before a table binds it."""

    expression: str
    data_type: pa.DataType | None = None

    def bind(self, column: str, schema: pa.Schema, subject: str) -> UDF:
        """The UDF computing ``column`` of a table of ``schema``; InvalidArgumentError naming ``subject``, the
        column and the expression when the table cannot evaluate it (a syntax error, an unknown column, a
        type that does not cast to ``data_type``)."""
        where = f"{subject}: computed column '{column}' = {self.expression!r}"
        toks = tokens(self.expression)  # checked by computed()
        names = user_columns(schema.names)
        inputs = referenced_columns(toks, names)
        if not inputs:
            raise InvalidArgumentError(f"{where} reads no column of the table (columns: {names}); a value that is "
                                       "the same for every row is not a computed column")
        empty = pa.RecordBatch.from_pylist([], schema=pa.schema([schema.field(c) for c in names]))
        try:
            inferred = SqlExpression(self.expression)(empty).type
        except (ValueError, OSError, RuntimeError, pa.ArrowException) as exc:
            raise InvalidArgumentError(f"{where} cannot be evaluated: {lance_reason(exc)}") from None
        out_type = self.data_type or inferred
        if pa.types.is_null(out_type):
            raise InvalidArgumentError(f"{where} has no type (it is NULL); pass data_type=")
        try:
            pa.nulls(0, inferred).cast(out_type, safe=True)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            raise InvalidArgumentError(f"{where} computes {inferred}, which does not cast to data_type "
                                       f"{out_type}") from None
        digest = hashlib.sha256(f"computed\0{normalized(toks)}\0{out_type}".encode()).hexdigest()[:16]
        return UDF(func=SqlExpression(self.expression, self.data_type), name=column, version=digest,
                   input_columns=inputs, data_type=out_type, kind=UDFKind.BATCH,
                   field_metadata={META_COMPUTED: self.expression})


def computed(expression: str, *, data_type: pa.DataType | None = None) -> Computed:
    """A maintained SQL computed column: ``tbl.add_columns({"c": computed("a * 2 + b")})``.

    The expression is Lance's SQL over the columns of a row (string literals in quotes, column names with odd
    characters in backquotes; ``info.v`` reads a struct's field).  The column is added all-NULL and kept as a
    UDF column is: ``backfill("c")`` computes it, for appended rows and rows whose inputs changed too; a
    changed expression is a new version.  Its type is the expression's, or ``data_type`` (a safe cast).

    InvalidArgumentError naming the expression: not a non-empty string, a quote left open, or a function whose
    value is not the row's (``random()``, ``now()``, ``uuid()``, an aggregate or a window); what only the
    table can tell (an unknown column, a syntax error) is refused by ``add_columns``, before anything changes.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgumentError(f"computed: the expression must be a non-empty SQL string, got {expression!r}")
    if data_type is not None and not isinstance(data_type, pa.DataType):
        raise InvalidArgumentError(f"computed({expression!r}): data_type must be a pyarrow DataType, got "
                                   f"{data_type!r}")
    try:
        toks = tokens(expression)
    except ValueError as exc:
        raise InvalidArgumentError(f"computed({expression!r}): {exc}") from None
    for i, t in enumerate(toks):
        word = t.text.lower()
        if t.kind != "name" or (i > 0 and toks[i - 1].text == "."):
            continue
        called = i + 1 < len(toks) and toks[i + 1].text == "("
        if word in NILADIC or (called and word in VOLATILE):
            raise InvalidArgumentError(f"computed({expression!r}): {t.text} is not a function of the row (a value "
                                       "recomputed later would differ): a computed column must be deterministic")
        if word in ACROSS_ROWS and (word == "over" or called):
            raise InvalidArgumentError(f"computed({expression!r}): {t.text} reads other rows; a computed column "
                                       "is a value of each row alone")
    return Computed(expression=expression, data_type=data_type)

