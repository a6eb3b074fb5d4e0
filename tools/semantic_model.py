"""The semantic model as data: entities, joins, dimensions, measures, segments, units and synonyms.

Why a model file at all: the small local model is bad at writing joins and filters from scratch and
good at filling a small typed object, so SQL questions are answered by slot filling over names
declared here, and a library (boring-semantic-layer, `tools.semantic_layer`) writes the SQL. This
module only reads, checks and drafts the file; it knows no dataset.

- `load_semantic_model` reads the YAML into pydantic models (`extra="forbid"`) through
  `tramita.base.policyfile.load_model`, then checks the cross-references the types cannot express;
  every error names the file and the field.
- `check_against_catalog` checks the model against a live database (tables, columns, join keys);
  `tramita ingest` runs it through `validate_against_database`.
- `draft_model` writes a first model from a database's tables, foreign keys and comments, for a
  person to curate (`tramita semantic draft --out FILE`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import sqlglot
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlglot import exp

from tramita.base.policyfile import PolicyError, load_model

__all__ = [
    "GRAINS",
    "OPERATORS",
    "Catalog",
    "ColumnKind",
    "Condition",
    "Dimension",
    "Entity",
    "Example",
    "Join",
    "Measure",
    "Ranked",
    "Segment",
    "SemanticModelSpec",
    "TableInfo",
    "catalog_from_engine",
    "catalog_from_schema",
    "check_against_catalog",
    "check_spec",
    "column_kind",
    "draft_model",
    "draft_yaml",
    "expr_columns",
    "load_semantic_model",
    "validate_against_database",
]

Grain = Literal["day", "week", "month", "quarter", "year"]
GRAINS: tuple[str, ...] = ("day", "week", "month", "quarter", "year")
ColumnKind = Literal["string", "integer", "number", "date", "timestamp", "boolean"]
Aggregation = Literal["count", "sum", "avg", "min", "max", "count_distinct"]
# The closed set of filter operators, shared by segments here and by the LLM's query object.
Operator = Literal["=", "!=", ">", ">=", "<", "<=", "in", "not_in", "between", "contains", "is_null", "not_null"]
OPERATORS: tuple[str, ...] = ("=", "!=", ">", ">=", "<", "<=", "in", "not_in", "between", "contains", "is_null",
                              "not_null")
Scalar = str | int | float | bool
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ranked(_Strict):
    """The words that say which side of a value of a scale a question means."""

    up: list[str] = Field(min_length=1, description="toward the first value ('or worse', 'mais urgente')")
    down: list[str] = Field(min_length=1, description="toward the last value ('or milder', 'menos urgente')")


class Dimension(_Strict):
    """A column (or arithmetic over columns, `expr`) that a query may group by, list or filter on."""

    column: str | None = None  # the table column; defaults to the dimension's name
    expr: str | None = None  # e.g. "requested_amount_usd - current_amount_usd"
    type: ColumnKind | None = None  # default: from the database column's type
    description: str = ""
    unit: str | None = None  # "USD", "minutes", "%"
    synonyms: list[str] = Field(default_factory=list)
    values: dict[str, list[str]] = Field(default_factory=dict)  # stored value -> words people use for it
    time_grains: list[Grain] = Field(default_factory=list)
    names_period: Grain | None = Field(None, description=(
        "a text column each of whose values names one calendar period of this grain, written as the "
        "calendar writes it ('2026-Q3', '2026-03', '2026-W19', '2026'): a period the question names is "
        "read as the values it covers"))
    ranked: Ranked | None = Field(None, description=(
        "the `values` are a scale, listed from the top (most urgent, worst) down: a comparison with one "
        "of them is the values on one side of it"))

    @model_validator(mode="after")
    def _scale(self) -> Dimension:
        if self.ranked is not None and len(self.values) < 2:
            raise ValueError("ranked: needs two or more `values`, listed from the top of the scale down")
        return self


class Measure(_Strict):
    """An aggregate over the entity's rows (count) or over one of its dimensions."""

    agg: Aggregation
    column: str | None = None  # a dimension of the same entity; required unless agg is count
    description: str = ""
    unit: str | None = None
    synonyms: list[str] = Field(default_factory=list)
    drill_members: list[str] = Field(
        default_factory=list,
        description="dimensions of the entity that show the rows behind a count (a list question filled as a count)")


class Condition(_Strict):
    """One condition on a dimension of the same entity (segments are lists of these)."""

    field: str
    op: Operator
    value: Scalar | list[Scalar] | None = None


class Segment(_Strict):
    """A named filter: words people use for a subset ("active tickets") bound to conditions."""

    description: str = ""
    synonyms: list[str] = Field(default_factory=list)
    where: list[Condition] = Field(min_length=1)


class Join(_Strict):
    """A many-to-one link from this entity's `column` to `target_column` of `entity`.

    The join's name is a role a query may write for the target (`approver.full_name`). `default`
    decides which join the plain entity name follows when an entity has several joins to the same
    target (None: followed only when it is the only one; False: never).
    """

    entity: str
    column: str
    target_column: str | None = None  # default: the target entity's primary key
    default: bool | None = None
    description: str = ""
    synonyms: list[str] = Field(default_factory=list)


class Entity(_Strict):
    """One table seen as a business entity."""

    table: str | None = None  # defaults to the entity's name
    description: str = ""
    synonyms: list[str] = Field(default_factory=list)
    primary_key: str | None = None
    dimensions: dict[str, Dimension] = Field(min_length=1)
    measures: dict[str, Measure] = Field(default_factory=dict)
    segments: dict[str, Segment] = Field(default_factory=dict)
    joins: dict[str, Join] = Field(default_factory=dict)
    # the date a period the question names applies to when it names no date itself ("incidents in
    # 2025": opened, not resolved); MetricFlow calls it the aggregation time dimension. Default: the
    # entity's only dimension with time grains, if it has exactly one.
    time_dimension: str | None = None

    def table_name(self, name: str) -> str:
        """The table behind the entity named `name`."""
        return self.table or name

    def period_dimension(self) -> str | None:
        """The date a period or a recency applies to: `time_dimension`, else the only dated dimension."""
        dated = [d for d, dim in self.dimensions.items() if dim.time_grains]
        return self.time_dimension or (dated[0] if len(dated) == 1 else None)


class Example(_Strict):
    """A worked question and its query object, shown to the LLM and compiled when the layer loads."""

    question: str
    query: dict[str, Any]


class SemanticModelSpec(_Strict):
    """The whole file: the entities and the worked examples shown to the LLM."""

    version: Literal[1] = 1
    name: str
    description: str = ""
    entities: dict[str, Entity] = Field(min_length=1)
    examples: list[Example] = Field(default_factory=list)


# ----------------------------------------------------------------------------------- loading

def load_semantic_model(path: Path) -> SemanticModelSpec:
    """Read and check a model file; `PolicyError` names the file and the field on any problem."""
    spec: SemanticModelSpec = load_model(path, SemanticModelSpec)
    problems = check_spec(spec)
    if problems:
        raise PolicyError("\n".join(f"{path}: field {p}" for p in problems))
    return spec


def check_spec(spec: SemanticModelSpec) -> list[str]:
    """Cross-references the types cannot express, as 'entities.x.measures.y.column: message'."""
    problems: list[str] = []
    for ename, ent in spec.entities.items():
        at = f"entities.{ename}"
        if not _NAME.match(ename):
            problems.append(f"{at}: entity names are lower_snake_case identifiers")
        names: dict[str, str] = {}
        for kind, group in (("dimension", ent.dimensions), ("measure", ent.measures), ("segment", ent.segments),
                            ("join", ent.joins)):
            for name in group:
                if not _NAME.match(name) or "__" in name:
                    problems.append(f"{at}.{kind}s.{name}: names are lower_snake_case identifiers without '__'")
                if name in names:
                    problems.append(f"{at}.{kind}s.{name}: the name is also a {names[name]} of {ename}")
                names[name] = kind
        if ent.primary_key is not None and ent.primary_key not in ent.dimensions:
            problems.append(f"{at}.primary_key: {ent.primary_key!r} is not a dimension of {ename}")
        if ent.time_dimension is not None and not (
                ent.time_dimension in ent.dimensions and ent.dimensions[ent.time_dimension].time_grains):
            problems.append(f"{at}.time_dimension: {ent.time_dimension!r} is not a dimension of {ename} "
                            "with time_grains")
        for dname, dim in ent.dimensions.items():
            dat = f"{at}.dimensions.{dname}"
            if dim.column and dim.expr:
                problems.append(f"{dat}: give either column or expr, not both")
            if dim.expr is not None:
                try:
                    expr_columns(dim.expr)
                except ValueError as exc:
                    problems.append(f"{dat}.expr: {exc}")
            if dim.time_grains and dim.type not in (None, "date", "timestamp"):
                problems.append(f"{dat}.time_grains: only date and timestamp dimensions have time grains")
            if dim.names_period is not None and (dim.time_grains or dim.expr or dim.type not in (None, "string")):
                problems.append(f"{dat}.names_period: only a text column names periods (not a date, a number "
                                "or an expression)")
        for mname, meas in ent.measures.items():
            mat = f"{at}.measures.{mname}"
            if meas.agg != "count" and not meas.column:
                problems.append(f"{mat}.column: a {meas.agg} measure needs the dimension it aggregates")
            if meas.column and meas.column not in ent.dimensions:
                problems.append(f"{mat}.column: {meas.column!r} is not a dimension of {ename}")
            problems.extend(f"{mat}.drill_members: {d!r} is not a dimension of {ename}"
                            for d in meas.drill_members if d not in ent.dimensions)
        for sname, seg in ent.segments.items():
            for i, cond in enumerate(seg.where):
                problems.extend(f"{at}.segments.{sname}.where.{i}.{p}" for p in _check_condition(cond, ent, ename))
        for jname, join in ent.joins.items():
            jat = f"{at}.joins.{jname}"
            if jname in spec.entities:
                problems.append(f"{jat}: a join (role) may not be named like an entity")
            target = spec.entities.get(join.entity)
            if target is None:
                problems.append(f"{jat}.entity: unknown entity {join.entity!r}; known: {', '.join(spec.entities)}")
            elif join.target_column is None and target.primary_key is None:
                problems.append(f"{jat}.target_column: {join.entity} declares no primary_key; name the target column")
    return problems


def _check_condition(cond: Condition, ent: Entity, ename: str) -> list[str]:
    if cond.field not in ent.dimensions:
        return [f"field: {cond.field!r} is not a dimension of {ename}"]
    listy = isinstance(cond.value, list)
    if cond.op in ("in", "not_in", "between") and not listy:
        return [f"value: {cond.op} takes a list"]
    if cond.op in ("is_null", "not_null") and cond.value is not None:
        return [f"value: {cond.op} takes no value"]
    if cond.op not in ("in", "not_in", "between", "is_null", "not_null") and (listy or cond.value is None):
        return [f"value: {cond.op} takes one value"]
    return []


_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Paren, exp.Neg, exp.Literal, exp.Column, exp.Identifier)


def expr_columns(text: str) -> list[str]:
    """The columns of a derived dimension's expression; only + - * / over columns and numbers is
    allowed, so the expression means the same on every engine and needs no function allow-list.
    """
    try:
        tree = sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as exc:
        raise ValueError(f"cannot parse {text!r}: {str(exc).splitlines()[0]}") from exc
    for node in tree.walk():
        if not isinstance(node, _ARITHMETIC):
            raise ValueError(f"{text!r}: only + - * / over columns and numbers, not {node.sql()!r}")
        if isinstance(node, exp.Column) and node.table:
            raise ValueError(f"{text!r}: write columns of the entity's own table without a table name")
        if isinstance(node, exp.Literal) and node.is_string:
            raise ValueError(f"{text!r}: text literals are not allowed")
    return [c.name for c in tree.find_all(exp.Column)]


# ----------------------------------------------------------------------------------- catalog

@dataclass
class TableInfo:
    """What the database says about one table."""

    columns: dict[str, str]  # name -> the database's type text
    primary_key: tuple[str, ...] = ()
    unique: list[tuple[str, ...]] = field(default_factory=list)
    foreign_keys: list[tuple[str, str, str]] = field(default_factory=list)  # (column, table, column)
    comment: str = ""
    column_comments: dict[str, str] = field(default_factory=dict)
    enums: dict[str, tuple[str, ...]] = field(default_factory=dict)  # CHECK (col IN (...)) values

    def is_unique(self, column: str) -> bool:
        """Whether `column` alone is a key (primary key or single-column unique constraint)."""
        return (column,) == self.primary_key or (column,) in self.unique


Catalog = dict[str, TableInfo]


def column_kind(type_text: str) -> ColumnKind:
    """The semantic type of a database type name (SQLite declared types, PostgreSQL types)."""
    t = type_text.upper()
    if "TIMESTAMP" in t or "DATETIME" in t:
        return "timestamp"
    if t.startswith("DATE"):
        return "date"
    if "BOOL" in t:
        return "boolean"
    if "INT" in t:
        return "integer"
    if any(k in t for k in ("NUMERIC", "DECIMAL", "REAL", "FLOAT", "DOUBLE", "MONEY")):
        return "number"
    return "string"


def catalog_from_schema(schema: Any) -> Catalog:
    """A catalog from `tools.sql_schema.Schema` (the DDL the SQL tool already reads)."""
    out: Catalog = {}
    for table in schema.tables:
        fks = [(c.name, *c.references.split(".", 1)) for c in table.columns if c.references]
        out[table.name] = TableInfo(
            columns={c.name: c.type for c in table.columns}, primary_key=tuple(table.primary_key),
            foreign_keys=fks, comment=table.comment,
            column_comments={c.name: c.comment for c in table.columns if c.comment},
            enums={c.name: tuple(c.enum) for c in table.columns if c.enum})
    return out


def catalog_from_engine(engine: Any, tables: list[str] | None = None) -> Catalog:
    """A catalog read live from a SQLAlchemy engine: columns, keys, foreign keys, CHECK (.. IN ..)
    lists and comments (PostgreSQL comments; for SQLite the `--` comments kept in the stored DDL).
    """
    from sqlalchemy import inspect

    insp = inspect(engine)
    names = tables if tables is not None else insp.get_table_names()
    sqlite_ddl = _sqlite_ddl(engine) if engine.dialect.name == "sqlite" else {}
    out: Catalog = {}
    for name in names:
        if not insp.has_table(name):
            continue
        cols = insp.get_columns(name)
        pk = tuple(insp.get_pk_constraint(name).get("constrained_columns") or ())
        unique = [tuple(u["column_names"]) for u in insp.get_unique_constraints(name)]
        unique += [tuple(i["column_names"]) for i in insp.get_indexes(name) if i.get("unique")]
        fks = [(fk["constrained_columns"][0], fk["referred_table"], (fk["referred_columns"] or [""])[0])
               for fk in insp.get_foreign_keys(name) if len(fk["constrained_columns"]) == 1]
        enums: dict[str, tuple[str, ...]] = {}
        try:
            checks = insp.get_check_constraints(name)
        except NotImplementedError:
            checks = []
        for check in checks:
            enums.update(_in_lists(str(check.get("sqltext", ""))))
        comments = {c["name"]: c["comment"] for c in cols if c.get("comment")}
        table_comment = ""
        try:
            table_comment = insp.get_table_comment(name).get("text") or ""
        except NotImplementedError:
            pass
        ddl_comments = _ddl_comments(sqlite_ddl.get(name, ""))
        out[name] = TableInfo(columns={c["name"]: str(c["type"]) for c in cols}, primary_key=pk, unique=unique,
                              foreign_keys=fks, comment=table_comment,
                              column_comments={**ddl_comments, **comments}, enums=enums)
    return out


def _sqlite_ddl(engine: Any) -> dict[str, str]:
    from sqlalchemy import text

    with engine.connect() as conn:
        return {str(r[0]): str(r[1] or "") for r in conn.execute(
            text("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))}


def _ddl_comments(ddl: str) -> dict[str, str]:
    """`col TYPE ... -- comment` lines of a CREATE TABLE statement."""
    out: dict[str, str] = {}
    for line in ddl.splitlines()[1:]:
        body, sep, comment = line.partition("--")
        words = body.split()
        if sep and words and re.match(r"^\w+$", words[0]) and words[0].upper() not in ("PRIMARY", "UNIQUE", "FOREIGN",
                                                                                        "CHECK", "CONSTRAINT"):
            out[words[0]] = comment.strip()
    return out


def _in_lists(check_sql: str) -> dict[str, tuple[str, ...]]:
    try:
        tree = sqlglot.parse_one(check_sql)
    except sqlglot.errors.ParseError:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for node in tree.find_all(exp.In):
        if isinstance(node.this, exp.Column):
            vals = tuple(v.name for v in node.expressions if isinstance(v, exp.Literal) and v.is_string)
            if vals:
                out[node.this.name] = vals
    return out


def check_against_catalog(spec: SemanticModelSpec, catalog: Catalog) -> list[str]:
    """Every table, column and join key the model names must exist; a join's target column must be
    unique (otherwise a many-to-one join would repeat rows and inflate every measure).
    """
    problems: list[str] = []
    for ename, ent in spec.entities.items():
        at = f"entities.{ename}"
        table = ent.table_name(ename)
        info = catalog.get(table)
        if info is None:
            problems.append(f"{at}.table: table {table!r} is not in the database")
            continue
        for dname, dim in ent.dimensions.items():
            dat = f"{at}.dimensions.{dname}"
            cols = expr_columns(dim.expr) if dim.expr else [dim.column or dname]
            missing = [c for c in cols if c not in info.columns]
            if missing:
                problems.append(f"{dat}: column {missing[0]!r} is not in table {table}"
                                f" (columns: {', '.join(info.columns)})")
                continue
            kind = dim.type or (column_kind(info.columns[cols[0]]) if not dim.expr else "number")
            if dim.time_grains and kind not in ("date", "timestamp"):
                problems.append(f"{dat}.time_grains: {table}.{cols[0]} is {info.columns[cols[0]]}, not a date or timestamp")
        for jname, join in ent.joins.items():
            jat = f"{at}.joins.{jname}"
            if join.column not in info.columns:
                problems.append(f"{jat}.column: column {join.column!r} is not in table {table}")
            target = spec.entities.get(join.entity)
            if target is None:
                continue
            ttable = target.table_name(join.entity)
            tinfo = catalog.get(ttable)
            tcol = join.target_column or _target_column(target)
            if tinfo is None:
                problems.append(f"{jat}.entity: table {ttable!r} is not in the database")
            elif tcol not in tinfo.columns:
                problems.append(f"{jat}.target_column: column {tcol!r} is not in table {ttable}")
            elif not tinfo.is_unique(tcol):
                problems.append(f"{jat}.target_column: {ttable}.{tcol} is not unique, so the join would repeat rows")
    return problems


def _check_period_text(spec: SemanticModelSpec, engine: Any) -> list[str]:
    """Each stored value of a column that names periods (`Dimension.names_period`) is written as
    the calendar writes its grain; a value that is not would never be found by a period filter.
    """
    from sqlalchemy import text

    from tools.semantic_layer import SemanticQueryError, period_labels  # the calendar's one writer of periods

    def names(value: str, grain: str) -> bool:
        try:
            return period_labels(value, grain)[0] == [value]
        except SemanticQueryError:
            return False

    problems: list[str] = []
    with engine.connect() as conn:
        for ename, ent in spec.entities.items():
            for dname, dim in ent.dimensions.items():
                if dim.names_period is None:
                    continue
                column = dim.column or dname
                rows = conn.execute(text(f'SELECT DISTINCT "{column}" FROM "{ent.table_name(ename)}" '
                                         f'WHERE "{column}" IS NOT NULL')).fetchall()
                bad = [str(r[0]) for r in rows if not names(str(r[0]), dim.names_period)]
                if bad:
                    problems.append(f"entities.{ename}.dimensions.{dname}.names_period: stored value {bad[0]!r} "
                                    f"does not name a {dim.names_period} as the calendar writes it")
    return problems


def _target_column(target: Entity) -> str:
    pk = target.primary_key or ""
    dim = target.dimensions.get(pk)
    return (dim.column or pk) if dim else pk


def validate_against_database(path: Path, engine: Any) -> dict[str, int]:
    """Load the model file and check it against the live database; `PolicyError` names the file
    and the entry. Returns counts for the ingest report.
    """
    spec = load_semantic_model(path)
    tables = [e.table_name(n) for n, e in spec.entities.items()]
    catalog = catalog_from_engine(engine, tables)
    problems = check_against_catalog(spec, catalog) or _check_period_text(spec, engine)
    if problems:
        raise PolicyError("\n".join(f"{path}: field {p}" for p in problems))
    return {"entities": len(spec.entities),
            "dimensions": sum(len(e.dimensions) for e in spec.entities.values()),
            "measures": sum(len(e.measures) for e in spec.entities.values()),
            "joins": sum(len(e.joins) for e in spec.entities.values())}


# ------------------------------------------------------------------------------------- draft

def draft_model(catalog: Catalog, name: str = "draft") -> dict[str, Any]:
    """A first model from what the database knows: one entity per table, every column a dimension
    (date and timestamp columns with all time grains, CHECK-IN lists as values), count plus
    sum/avg/min/max of numeric non-key columns, one join per single-column foreign key (named after
    the column without `_id`). Synonyms, segments, units and defaults are left for a person.
    """
    entities: dict[str, Any] = {}
    for table, info in sorted(catalog.items()):
        fk_cols = {c for c, _, _ in info.foreign_keys}
        dims: dict[str, Any] = {}
        measures: dict[str, Any] = {"count": {"agg": "count"}}
        for col, type_text in info.columns.items():
            kind = column_kind(type_text)
            dim: dict[str, Any] = {}
            if info.column_comments.get(col):
                dim["description"] = info.column_comments[col]
            if kind in ("date", "timestamp"):
                dim["time_grains"] = list(GRAINS)
            if col in info.enums:
                dim["values"] = {v: [] for v in info.enums[col]}
            dims[col] = dim
            keyish = col in fk_cols or col in info.primary_key or col.endswith("_id")
            if kind in ("integer", "number") and not keyish:
                for agg in ("sum", "avg", "min", "max"):
                    measures[f"{agg}_{col}"] = {"agg": agg, "column": col}
        joins: dict[str, Any] = {}
        for col, ref_table, ref_col in info.foreign_keys:
            if ref_table not in catalog:
                continue
            role = re.sub(r"_id$", "", col) or col
            if role in catalog or role in joins or role in dims:
                role = f"{role}_ref"
            join: dict[str, Any] = {"entity": ref_table, "column": col}
            if (ref_col,) != catalog[ref_table].primary_key:
                join["target_column"] = ref_col
            joins[role] = join
        entity: dict[str, Any] = {}
        if _entity_name(table) != table:
            entity["table"] = table
        if info.comment:
            entity["description"] = info.comment
        if len(info.primary_key) == 1:
            entity["primary_key"] = info.primary_key[0]
        entity["dimensions"] = dims
        entity["measures"] = measures
        if joins:
            entity["joins"] = joins
        entities[_entity_name(table)] = entity
    for ent in entities.values():  # targets named by their entity name
        for join in ent.get("joins", {}).values():
            join["entity"] = _entity_name(join["entity"])
    return {"version": 1, "name": name, "entities": entities}


def _entity_name(table: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", table.lower()).strip("_") or "t"


def draft_yaml(catalog: Catalog, name: str = "draft", source: str = "") -> str:
    """`draft_model` as YAML with a header that says what to curate."""
    import yaml

    head = (f"# Semantic model drafted from {source or 'the database'}.\n"
            "# Curate before use: add synonyms (the words your users say), units, segments (named filters),\n"
            "# `default: true` on the join a plain entity name should follow, and delete what nobody asks about.\n")
    body = yaml.safe_dump(draft_model(catalog, name), sort_keys=False, allow_unicode=True, width=120)
    return head + body
