"""Read-only SQL for question answering: validate with sqlglot, then run on a read-only connection.

The database engine is the barrier; validation stands in front of it to give clear refusals and to
keep the query inside the dataset:

1. `validate` parses with sqlglot in the target dialect and accepts exactly one SELECT / UNION /
   INTERSECT / EXCEPT / WITH tree over the allow-listed tables, with no writing node anywhere (data
   modifying CTEs, SELECT INTO, FOR UPDATE), no dangerous function and no system catalog. It
   returns the SQL *regenerated from the checked tree* without comments, plus a LIMIT, so the text
   the database runs is exactly the text that was checked: a tokenizer disagreement between
   sqlglot and the server (nested comments, backslash escapes) cannot smuggle a second statement.
2. `query` runs it on a connection that cannot write: SQLite opened with `mode=ro`, `query_only`,
   an authorizer that only permits reads of allow-listed tables and a progress-handler timeout;
   PostgreSQL as a SELECT-only role (`ingest.sql_loader.ensure_readonly_role`) inside
   `BEGIN READ ONLY` with `SET LOCAL statement_timeout`.

Errors: `UnsafeSQLError` (refused; `repairable` tells a text-to-SQL repair loop whether retrying can
help), `SQLExecutionError` (the database's own message, for the repair loop) and
`tools.database.DatabaseUnavailable` (the database cannot be reached).
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import time
import unicodedata
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from tools.database import DatabaseUnavailable, sqlite_path
from tools.sql_schema import dataset_tables, load_schema
from tools.sql_schema import join_hints as _join_hints
from tools.sql_schema import link_schema as _link_schema
from tools.sql_schema import schema_summary as _summary
from tramita.base.paths import SAMPLE_DIR

__all__ = [
    "DENIED_FUNCTIONS",
    "DENIED_FUNCTION_PREFIXES",
    "DatabaseUnavailable",
    "SQLExecutionError",
    "SQLTool",
    "UnsafeSQLError",
    "dialect_for_url",
    "is_denied_function",
]


class UnsafeSQLError(ValueError):
    """The query was refused before reaching the database. `repairable` is True when the text is
    merely malformed or names something unknown (a repair loop may retry) and False for write,
    exfiltration or denial-of-service attempts.
    """

    def __init__(self, reason: str, *, repairable: bool = False) -> None:
        """Keep `reason` and `repairable` as attributes, so callers branch on them without parsing the message."""
        super().__init__(reason)
        self.reason = reason
        self.repairable = repairable


class SQLExecutionError(RuntimeError):
    """The database rejected or aborted a validated query; the message is the database's text."""


# Functions that read or write files, reach other servers, sleep, signal backends, change
# settings, touch large objects or sequences, or run SQL given as a string (which would bypass
# this validation). Matched case-insensitively on the bare name; a schema-qualified call is refused
# separately. `current_setting` stays allowed: it only reads, and privileged settings are hidden
# from an unprivileged role.
DENIED_FUNCTIONS: dict[str, str] = {
    # PostgreSQL: settings, sequences, transactions
    "set_config": "changes a server setting",
    "nextval": "advances a sequence (a write)",
    "setval": "changes a sequence (a write)",
    "currval": "sequence state",
    "lastval": "sequence state",
    "txid_current": "assigns a transaction id (a write)",
    # PostgreSQL: functions that execute SQL text or dump whole tables (bypass the allow-list)
    "query_to_xml": "executes SQL given as text",
    "query_to_xmlschema": "executes SQL given as text",
    "query_to_xml_and_xmlschema": "executes SQL given as text",
    "cursor_to_xml": "reads a cursor",
    "cursor_to_xmlschema": "reads a cursor",
    "table_to_xml": "dumps a table by name",
    "table_to_xmlschema": "dumps a table by name",
    "table_to_xml_and_xmlschema": "dumps a table by name",
    "schema_to_xml": "dumps a schema",
    "schema_to_xmlschema": "dumps a schema",
    "schema_to_xml_and_xmlschema": "dumps a schema",
    "database_to_xml": "dumps the database",
    "database_to_xmlschema": "dumps the database",
    "database_to_xml_and_xmlschema": "dumps the database",
    "ts_stat": "executes SQL given as text",
    "copy": "bulk import/export",
    "program": "runs a program",
    # SQLite: extensions, files, internals
    "load_extension": "loads native code",
    "readfile": "reads a file",
    "writefile": "writes a file",
    "edit": "runs an editor",
    "fts3_tokenizer": "can register native code",
    "randomblob": "can allocate huge blobs",
    "zeroblob": "can allocate huge blobs",
    "fsdir": "lists the file system",
    "zipfile": "reads archives from the file system",
    "sqlar_uncompress": "reads archives",
    "shell": "runs a program",
    "system": "runs a program",
}
# Whole families: PostgreSQL's pg_* admin/file/sleep/lock/notify functions, dblink, large objects
# (lo_import/lo_export/...), file_fdw helpers; SQLite's sqlite_* internals and pragma_* table
# functions.
DENIED_FUNCTION_PREFIXES: tuple[str, ...] = (
    "pg_", "dblink", "lo_", "file_", "sqlite_", "sqlite3_", "pragma_", "xp_", "sys_",
)
# Table-valued functions allowed in FROM (everything else there must be an allow-listed table).
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "generate_series", "exploding_generate_series", "unnest", "json_each", "json_tree", "jsonb_each", "jsonb_array_elements",
    "json_array_elements",
})
# Tree nodes that write, change schema, control transactions or lock rows.
_FORBIDDEN_NODES: dict[str, str] = {
    "Insert": "INSERT", "Update": "UPDATE", "Delete": "DELETE", "Merge": "MERGE",
    "Create": "CREATE", "Drop": "DROP", "Alter": "ALTER", "AlterTable": "ALTER",
    "TruncateTable": "TRUNCATE", "Command": "a non-query command", "Pragma": "PRAGMA",
    "Set": "SET", "Transaction": "transaction control", "Commit": "COMMIT",
    "Rollback": "ROLLBACK", "Into": "SELECT INTO", "Lock": "row locking (FOR UPDATE/SHARE)",
    "Copy": "COPY", "Attach": "ATTACH", "Detach": "DETACH", "LoadData": "LOAD DATA",
    "Use": "USE", "Grant": "GRANT", "Revoke": "REVOKE", "Analyze": "ANALYZE", "Vacuum": "VACUUM",
    "Refresh": "REFRESH", "Cache": "CACHE", "Uncache": "UNCACHE", "Describe": "DESCRIBE",
    "Show": "SHOW", "Kill": "KILL", "Comment": "COMMENT",
}
_FORBIDDEN_TYPES: tuple[tuple[type[exp.Expression], str], ...] = tuple(
    (getattr(exp, name), label) for name, label in _FORBIDDEN_NODES.items() if hasattr(exp, name)
)
_STRING_TOKENS = frozenset(
    getattr(TokenType, name) for name in (
        "STRING", "NATIONAL_STRING", "RAW_STRING", "HEREDOC_STRING", "BYTE_STRING",
        "UNICODE_STRING", "BIT_STRING", "HEX_STRING",
    ) if hasattr(TokenType, name)
)
_DEFAULT_SCHEMA = {"sqlite": "main", "postgres": "public"}
_SQLITE_RECURSIVE = getattr(sqlite3, "SQLITE_RECURSIVE", 33)


def is_denied_function(name: str) -> str | None:
    """The reason a function name is refused, or None when it is allowed."""
    low = name.lower().strip('"`[]')
    if low in DENIED_FUNCTIONS:
        return DENIED_FUNCTIONS[low]
    for prefix in DENIED_FUNCTION_PREFIXES:
        if low.startswith(prefix):
            return f"in the denied family {prefix}*"
    return None


def dialect_for_url(url: str) -> str:
    """The sqlglot dialect name for a database URL."""
    if url.startswith("sqlite"):
        return "sqlite"
    if url.startswith(("postgresql", "postgres")):
        return "postgres"
    raise ValueError(f"unsupported database URL for SQLTool: {url.split(':', 1)[0]}:// "
                     "(use sqlite:///PATH or postgresql://...)")


def _libpq_url(url: str) -> str:
    """The URL as plain postgresql://, which psycopg wants (SQLAlchemy URLs carry a +driver)."""
    scheme, sep, rest = url.partition("://")
    return "postgresql" + sep + rest if scheme.startswith("postgres") else url


def _plain(value: Any) -> Any:
    """JSON-friendly values: Decimal → float, dates and times → ISO-like text, bytes → hex."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return str(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


class SQLTool:
    """Read-only question answering over the business database (SQLite path or PostgreSQL URL).

    For PostgreSQL pass the URL of the SELECT-only role (`ensure_readonly_role`); the READ ONLY
    transaction alone can be undone by the client and is only the second layer.
    """

    def __init__(self, url: str, *, dialect: str | None = None, allowed_tables: set[str] | None = None,
                 row_cap: int = 200, timeout_s: float = 5.0, sample_dir: Path = SAMPLE_DIR) -> None:
        """Check the limits and fix the allowed tables (default: the dataset's); no connection is opened here."""
        if row_cap < 1:
            raise ValueError("row_cap must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.url = url
        self.dialect = dialect or dialect_for_url(url)
        if self.dialect not in ("sqlite", "postgres"):
            raise ValueError(f"unsupported dialect {self.dialect!r} (sqlite or postgres)")
        self.schema_path = sample_dir / "schema.sql"
        tables = allowed_tables if allowed_tables is not None else set(dataset_tables(self.schema_path))
        self.allowed_tables = frozenset(t.lower() for t in tables)
        self.row_cap = row_cap
        self.timeout_s = timeout_s
        self._sqlite_file = sqlite_path(url) if self.dialect == "sqlite" else None

    # ------------------------------------------------------------------------------ validation

    def validate(self, sql: str) -> str:
        """Return the safe SQL to run (regenerated, comments dropped, LIMIT ≤ row_cap) or raise
        `UnsafeSQLError` with the reason.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise UnsafeSQLError("empty query", repairable=True)
        if "\x00" in sql:
            raise UnsafeSQLError("NUL character in query")
        tokens = self._tokens(sql)
        self._check_tokens(tokens)
        try:
            statements = [s for s in sqlglot.parse(sql, read=self.dialect) if s is not None]
        except (ParseError, TokenError) as exc:
            raise UnsafeSQLError(f"could not parse the query: {_first_line(exc)}", repairable=True) from exc
        if len(statements) != 1:
            raise UnsafeSQLError(f"exactly one statement is allowed, found {len(statements)}")
        tree = statements[0]
        while isinstance(tree, exp.Subquery) and not tree.alias and isinstance(tree.this, exp.Query):
            tree = tree.this  # "(SELECT ...)" at top level
        if not isinstance(tree, (exp.Select, exp.SetOperation)):
            raise UnsafeSQLError(f"only SELECT queries are allowed, not {_describe(tree, tokens)}")
        self._check_tree(tree)
        self._apply_limit(tree)
        return tree.sql(dialect=self.dialect, comments=False)

    def _tokens(self, sql: str) -> list[Token]:
        try:
            return list(sqlglot.Dialect.get_or_raise(self.dialect).tokenize(sql))
        except (TokenError, ParseError) as exc:
            raise UnsafeSQLError(f"could not read the query: {_first_line(exc)}", repairable=True) from exc

    def _check_tokens(self, tokens: list[Token]) -> None:
        """Refuse look-alike characters outside string literals and dangerous calls as written."""
        for i, token in enumerate(tokens):
            if token.token_type in _STRING_TOKENS:
                continue
            if not token.text.isascii():
                bad = next(ch for ch in token.text if not ch.isascii())
                name = unicodedata.name(bad, f"U+{ord(bad):04X}")
                raise UnsafeSQLError(
                    f"non-ASCII character {bad!r} ({name}) in {token.text!r} outside a string "
                    "literal (look-alike keywords and identifiers are refused; put names in quotes "
                    "only if they are real ASCII names)")
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and nxt.token_type == TokenType.L_PAREN:
                reason = is_denied_function(token.text)
                if reason:
                    raise UnsafeSQLError(f"function {token.text}() is not allowed ({reason})")

    def _check_tree(self, tree: exp.Expression) -> None:
        """Writes and locks first (the most important refusal), then CTE bodies, functions, tables."""
        nodes = list(tree.walk())
        for node in nodes:
            for kind, label in _FORBIDDEN_TYPES:
                if isinstance(node, kind):
                    raise UnsafeSQLError(f"{label} is not allowed: only read-only SELECT queries")
        for node in nodes:
            if isinstance(node, exp.CTE):
                body = node.this
                if not isinstance(body, (exp.Select, exp.SetOperation)):
                    raise UnsafeSQLError(f"WITH {node.alias}: a CTE must be a SELECT, not {type(body).__name__.upper()}")
            elif isinstance(node, exp.Func):
                self._check_function(node)
            elif isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
                raise UnsafeSQLError(f"schema-qualified function call {node.sql(self.dialect)} is not allowed")
            elif isinstance(node, exp.Table):
                self._check_table(node)

    def _check_function(self, node: exp.Func) -> None:
        for name in _function_names(node):
            reason = is_denied_function(name)
            if reason:
                raise UnsafeSQLError(f"function {name.lower()}() is not allowed ({reason})")

    def _check_table(self, node: exp.Table) -> None:
        if isinstance(node.this, exp.Func):
            names = _function_names(node.this)
            if not names & ALLOWED_TABLE_FUNCTIONS:
                raise UnsafeSQLError(f"table function {min(names)}() is not allowed in FROM")
            return
        ident = node.this
        # Unquoted names fold to lower case in both engines; a quoted one is taken literally.
        name = node.name if isinstance(ident, exp.Identifier) and ident.quoted else node.name.lower()
        qualifier = node.db.lower()
        if node.catalog or qualifier not in ("", _DEFAULT_SCHEMA[self.dialect]):
            raise UnsafeSQLError(f"table {node.sql(self.dialect)} is outside the dataset "
                                 "(system catalogs and other schemas are not allowed)")
        if not qualifier and _visible_cte(node, name):
            return
        if name not in self.allowed_tables:
            hint = "" if _is_system_name(name) else f"; known tables: {', '.join(sorted(self.allowed_tables))}"
            raise UnsafeSQLError(f"table {name!r} is not allowed{hint}", repairable=not _is_system_name(name))

    def _apply_limit(self, tree: exp.Expression) -> None:
        limit = tree.args.get("limit")
        if isinstance(limit, exp.Fetch):
            count = limit.args.get("count")
            value = _int_literal(count)
            if value is None or value > self.row_cap:
                limit.set("count", exp.Literal.number(self.row_cap))
            return
        if isinstance(limit, exp.Limit):
            value = _int_literal(limit.expression)
            if value is not None and value <= self.row_cap:
                return
        tree.set("limit", exp.Limit(expression=exp.Literal.number(self.row_cap)))

    # ------------------------------------------------------------------------------- execution

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Validate, then execute on the read-only connection; rows as plain dicts."""
        return self._execute(self.validate(sql))

    def available(self) -> bool:
        """True when the database answers a trivial query; never raises."""
        try:
            self._execute("SELECT 1 AS ok")
            return True
        except Exception:  # noqa: BLE001 - availability probe: any failure means "not available"
            return False

    def _execute(self, sql: str) -> list[dict[str, Any]]:
        """Run already-validated SQL. Not for untrusted text: `query` is the entry point."""
        if self.dialect == "sqlite":
            return self._execute_sqlite(sql)
        return self._execute_postgres(sql)

    def _open_sqlite(self) -> sqlite3.Connection:
        """A connection that cannot write: read-only open mode, query_only, and an authorizer that
        permits nothing but reading allow-listed tables and calling allowed functions.
        """
        path = self._sqlite_file
        if path is None:
            raise DatabaseUnavailable(f"not a sqlite:/// URL: {self.url}")
        if not path.is_file():
            raise DatabaseUnavailable(f"SQLite database not found: {path}")
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=self.timeout_s, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            # Also opens and checks the file. Every stored table or view that is not allowed is
            # denied below (CTEs reach the authorizer as reads too, so "not allowed" cannot mean
            # "not in the allow-list").
            stored = {str(r[0]).lower() for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.Error as exc:
            raise DatabaseUnavailable(f"cannot open SQLite database {path}: {exc}") from exc
        if hasattr(conn, "setlimit"):
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        denied = frozenset(stored - self.allowed_tables)
        conn.set_authorizer(lambda action, arg1, arg2, _db, _trigger:
                            _sqlite_authorize(action, arg1, arg2, denied))
        return conn

    def _execute_sqlite(self, sql: str) -> list[dict[str, Any]]:
        conn = self._open_sqlite()
        deadline = time.monotonic() + self.timeout_s
        timed_out = False

        def _progress() -> int:
            nonlocal timed_out
            timed_out = time.monotonic() > deadline
            return 1 if timed_out else 0

        conn.set_progress_handler(_progress, 10_000)
        try:
            cur = conn.execute(sql)
            columns = [d[0] for d in cur.description or ()]
            rows = cur.fetchmany(self.row_cap)
        except sqlite3.Error as exc:
            if timed_out:
                raise SQLExecutionError(f"query cancelled: it ran longer than {self.timeout_s:g}s") from exc
            raise SQLExecutionError(str(exc)) from exc
        finally:
            conn.close()
        return _as_dicts(columns, rows)

    def _connect_postgres(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(_libpq_url(self.url), autocommit=True,
                                   connect_timeout=max(1, int(self.timeout_s)))
        except psycopg.Error as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc

    def _execute_postgres(self, sql: str) -> list[dict[str, Any]]:
        import psycopg
        from psycopg import errors

        conn = self._connect_postgres()
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN READ ONLY")
                cur.execute(f"SET LOCAL statement_timeout = {max(1, int(self.timeout_s * 1000))}")
                try:
                    # prepare=True: the extended protocol refuses a second statement on its own.
                    cur.execute(sql.encode(), prepare=True)
                    columns = [d.name for d in cur.description or ()]
                    rows = cur.fetchmany(self.row_cap) if cur.description else []
                finally:
                    if not conn.broken:
                        conn.execute("ROLLBACK")
        except errors.QueryCanceled as exc:
            raise SQLExecutionError(f"query cancelled: it ran longer than {self.timeout_s:g}s") from exc
        except psycopg.Error as exc:
            if conn.broken or isinstance(exc, psycopg.OperationalError):
                raise DatabaseUnavailable(f"PostgreSQL connection failed: {_first_line(exc)}") from exc
            raise SQLExecutionError(_pg_message(exc)) from exc
        finally:
            conn.close()
        return _as_dicts(columns, rows)

    # ---------------------------------------------------------------------------------- schema

    def schema_summary(self, max_chars: int = 3000, tables: list[str] | None = None) -> str:
        """Compact schema text for prompts (see tools.sql_schema.schema_summary)."""
        return _summary(max_chars, tables, schema=load_schema(self.schema_path))

    def link_schema(self, question: str, k: int = 6) -> list[str]:
        """Tables relevant to the question plus the join tables between them."""
        return _link_schema(question, k, schema=load_schema(self.schema_path))

    def join_hints(self, tables: list[str]) -> list[str]:
        """`a.x = b.y` for the foreign keys between `tables` (see tools.sql_schema.join_hints)."""
        return _join_hints(tables, schema=load_schema(self.schema_path))

    def value_hints(self, question: str, tables: list[str] | None = None) -> list[str]:
        """`table.column = 'value'` for the stored values the question names (tools.sql_values),
        read through this tool's own validated, read-only queries.
        """
        from tools.sql_values import value_index

        index = value_index(self.url, self.query, load_schema(self.schema_path))
        return [hit.render() for hit in index.match(question, tables)]


# ------------------------------------------------------------------------------------- helpers

def _sqlite_authorize(action: int, arg1: str | None, arg2: str | None, denied: frozenset[str]) -> int:
    """SQLite authorizer: SELECT, reads of anything but the denied tables (and sqlite_*
    internals), recursive CTEs and allowed functions; everything else (writes, PRAGMA, ATTACH,
    schema changes, transactions) is refused at prepare time.
    """
    if action in (sqlite3.SQLITE_SELECT, _SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_READ:
        table = (arg1 or "").lower()
        return sqlite3.SQLITE_DENY if table in denied or table.startswith("sqlite_") else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if is_denied_function(arg2 or "") else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _function_names(node: exp.Func) -> set[str]:
    """Every name a call may go by: as written (Anonymous), sqlglot's name and its class name."""
    names = {node.sql_name().lower(), re.sub(r"(?<!^)(?=[A-Z])", "_", type(node).__name__).lower()}
    if isinstance(node, exp.Anonymous):
        names.add(node.name.lower())
    return {n for n in names if n}


def _as_dicts(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as dicts; a repeated column name (`t.name, s.name`) gets a suffix instead of
    silently overwriting the first value.
    """
    keys: list[str] = []
    for col in columns:
        key, n = col, 1
        while key in keys:
            n += 1
            key = f"{col}_{n}"
        keys.append(key)
    return [{key: _plain(val) for key, val in zip(keys, row, strict=True)} for row in rows]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _pg_message(exc: Any) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    hint = getattr(diag, "message_hint", None) if diag is not None else None
    text = primary or _first_line(exc)
    return f"{text} (hint: {hint})" if hint else text


def _describe(node: exp.Expr, tokens: list[Token]) -> str:
    """What the refused statement is, in the user's words where possible (its first keyword)."""
    label = _FORBIDDEN_NODES.get(type(node).__name__)
    first = tokens[0].text.upper() if tokens else ""
    if label and label != "a non-query command":
        return label
    return first or type(node).__name__.upper()


def _int_literal(node: exp.Expression | None) -> int | None:
    if isinstance(node, exp.Literal) and node.is_int:
        return int(node.this)
    return None


def _is_system_name(name: str) -> bool:
    return name.startswith(("pg_", "sqlite_", "information_schema")) or name in {
        "sqlite_master", "sqlite_schema", "sqlite_temp_master", "tramita_meta", "tool_executions",
    }


def _visible_cte(table: exp.Table, name: str) -> bool:
    """True when `name` refers to a CTE in scope at this table reference. A CTE is visible in the
    body of its query, in later CTEs of the same WITH, and (WITH RECURSIVE) in every one of them;
    elsewhere the same name would reach the real table, so it must pass the allow-list.
    """
    node: exp.Expr | None = table
    child: exp.Expr | None = None
    while node is not None:
        with_ = (node.args.get("with_") or node.args.get("with")) if isinstance(node, exp.Query) else None
        if isinstance(with_, exp.With):
            ctes = list(with_.expressions)
            names = [c.alias.lower() for c in ctes]
            if name in names:
                if child is not with_:
                    return True  # referenced from the body
                # referenced from inside CTE number i of this WITH
                inside = next((i for i, c in enumerate(ctes) if _contains(c, table)), None)
                target = names.index(name)
                if with_.args.get("recursive") or (inside is not None and target < inside):
                    return True
        child, node = node, node.parent
    return False


def _contains(root: exp.Expr, node: exp.Expr) -> bool:
    cur: exp.Expr | None = node
    while cur is not None:
        if cur is root:
            return True
        cur = cur.parent
    return False
