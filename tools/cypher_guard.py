"""Read-only validation of Cypher text before it reaches a graph store.

The engine is the real barrier (LadybugDB opened read-only; Bolt sessions in read mode); this guard
comes in front of it because some servers (FalkorDB over Bolt) do not block writes at all, and
because a clear refusal ("CREATE is a writing clause") is better than an engine error.

A regex over the raw text cannot do this job: keywords inside string literals, backtick identifiers
or comments are harmless, and a keyword hidden by a comment boundary the regex gets wrong is not.
So the text is NFKC-normalised (full-width `ＣＲＥＡＴＥ` becomes `CREATE`), lexed with the same rules
as Cypher (strings with backslash escapes, backticks, `//` and `/* */` comments), and the tokens are
checked. Any non-ASCII character left outside strings, backticks and comments is refused: after
NFKC it can only be a homoglyph (Cyrillic `С`, Greek `Ε`) or invisible trickery, never a keyword
the schema needs. The text returned is the normalised text that was checked, plus a LIMIT.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

__all__ = [
    "WRITE_KEYWORDS",
    "UnsafeCypherError",
    "cypher_literal",
    "inline_parameters",
    "validate_cypher",
]


class UnsafeCypherError(ValueError):
    """The query was refused. `clause` names the offending clause when there is one;
    `repairable` is True for malformed text (a text-to-Cypher repair loop may retry) and False for
    write or exfiltration attempts (retrying will not help).
    """

    def __init__(self, reason: str, *, clause: str | None = None, repairable: bool = False) -> None:
        """Keep `reason`, `clause` and `repairable` as attributes, so callers branch on them without parsing the message."""
        super().__init__(reason)
        self.reason = reason
        self.clause = clause
        self.repairable = repairable


# Clauses that write, administer, read files or switch databases, in Neo4j/openCypher, GQL and
# LadybugDB (Kùzu) syntax. A word in this set is refused wherever it stands as a keyword.
WRITE_KEYWORDS: dict[str, str] = {
    "CREATE": "writing clause",
    "MERGE": "writing clause",
    "SET": "writing clause",
    "DELETE": "writing clause",
    "DETACH": "writing clause (DETACH DELETE / DETACH DATABASE)",
    "REMOVE": "writing clause",
    "INSERT": "writing clause (GQL synonym of CREATE)",
    "UPDATE": "writing clause",
    "DROP": "schema change",
    "ALTER": "schema change",
    "RENAME": "schema change",
    "TRUNCATE": "writing clause",
    "COMMENT": "schema change (COMMENT ON TABLE)",
    "FOREACH": "writing clause (FOREACH only exists to write)",
    "LOAD": "file access (LOAD CSV / LOAD FROM / LOAD EXTENSION)",
    "COPY": "bulk import/export",
    "IMPORT": "bulk import",
    "EXPORT": "bulk export",
    "INSTALL": "extension installation",
    "UNINSTALL": "extension removal",
    "ATTACH": "database attachment",
    "USE": "database switch",
    "SHOW": "administration command",
    "GRANT": "administration command",
    "DENY": "administration command",
    "REVOKE": "administration command",
    "START": "administration command",
    "STOP": "administration command",
    "TERMINATE": "administration command",
    "ENABLE": "administration command",
    "BEGIN": "transaction control",
    "COMMIT": "transaction control",
    "ROLLBACK": "transaction control",
    "CHECKPOINT": "transaction control",
    "EXPLAIN": "query plan request (GraphTool runs EXPLAIN itself)",
    "PROFILE": "query plan request (PROFILE executes the query)",
}
_READ_STARTS = frozenset({"MATCH", "OPTIONAL", "WITH", "UNWIND", "RETURN", "CALL"})
_COMMENT_ENDS = "\n\r\x0b\x0c\x85\u2028\u2029"  # end a // comment early rather than late
_MULTI_PUNCT = ("<>", "<=", ">=", "=~", "->", "<-", "..", "+=", "::", "!=")
_STRING_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Latin look-alikes, only to name the keyword a homoglyph imitates in the error message.
_CONFUSABLES = str.maketrans(
    "АВСЕНІЈКМОРЅТХУаеіјосрѕхуΑΒΕΖΗΙΚΜΝΟΡΤΥΧοᎪᏴᏟᎬᎻᏆᏦᎷᏒᏚᎢ",
    "ABCEHIJKMOPSTXYaeijocpsxyABEZHIKMNOPTYXoABCEHIKMRST",
)


@dataclass(frozen=True)
class Token:
    kind: str  # word | quoted | string | number | param | punct
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _refuse_char(text: str, pos: int) -> UnsafeCypherError:
    ch = text[pos]
    name = unicodedata.name(ch, f"U+{ord(ch):04X}")
    if not ch.isalnum():
        return UnsafeCypherError(
            f"non-ASCII or control character {ch!r} ({name}) at offset {pos} outside string "
            "literals and comments")
    start = pos
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    end = pos
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    word = text[start:end]
    looks_like = word.translate(_CONFUSABLES).upper()
    hint = f"; it imitates the keyword {looks_like}" if looks_like in WRITE_KEYWORDS else ""
    return UnsafeCypherError(
        f"non-ASCII character {ch!r} ({name}) in {word or ch!r} outside string literals "
        f"(possible homoglyph attack{hint}); quote unusual identifiers with backticks",
        clause=looks_like if hint else None,
    )


def tokenize(text: str) -> list[Token]:
    """Significant tokens of (already normalised) Cypher text; comments and spaces are dropped."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\n\r\f\v":
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] not in _COMMENT_ENDS:
                i += 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise UnsafeCypherError("unterminated /* comment", repairable=True)
            i = close + 2
        elif ch in "'\"":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise UnsafeCypherError(f"unterminated string literal starting at offset {i}",
                                        repairable=True)
            tokens.append(Token("string", text[i : j + 1], i, j + 1))
            i = j + 1
        elif ch == "`":
            j = i + 1
            while True:
                j = text.find("`", j)
                if j < 0:
                    raise UnsafeCypherError(f"unterminated backtick identifier at offset {i}",
                                            repairable=True)
                if text.startswith("``", j):  # doubled backtick = a literal backtick
                    j += 2
                    continue
                break
            tokens.append(Token("quoted", text[i : j + 1], i, j + 1))
            i = j + 1
        elif ch == "$":
            j = i + 1
            if j < n and text[j] == "`":
                end = text.find("`", j + 1)
                if end < 0:
                    raise UnsafeCypherError("unterminated backtick parameter name", repairable=True)
                j = end + 1
            else:
                while j < n and (text[j].isascii() and (text[j].isalnum() or text[j] == "_")):
                    j += 1
            if j == i + 1:
                raise UnsafeCypherError(f"'$' without a parameter name at offset {i}",
                                        repairable=True)
            tokens.append(Token("param", text[i:j], i, j))
            i = j
        elif ch.isascii() and ch.isdigit():
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j + 1 < n and text[j] == "." and text[j + 1].isascii() and text[j + 1].isdigit():
                j += 1
                while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                    j += 1
            tokens.append(Token("number", text[i:j], i, j))
            i = j
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            j = i
            while j < n and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j < n and not text[j].isascii():
                raise _refuse_char(text, j)
            tokens.append(Token("word", text[i:j], i, j))
            i = j
        elif not ch.isascii() or not ch.isprintable():
            raise _refuse_char(text, i)
        else:
            op = next((p for p in _MULTI_PUNCT if text.startswith(p, i)), ch)
            tokens.append(Token("punct", op, i, i + len(op)))
            i += len(op)
    return tokens


def _is_name_position(tokens: list[Token], k: int) -> bool:
    """True when word k can only be a property key or a label/type name: right after `.` that
    follows a value, or after `:` (a label). `1.CREATE` is not a property access.
    """
    if k == 0:
        return False
    prev = tokens[k - 1]
    if prev.kind == "punct" and prev.text == ":":
        return True
    if prev.kind == "punct" and prev.text == "." and k >= 2:
        before = tokens[k - 2]
        return before.kind in ("word", "quoted", "param") or before.text in (")", "]", "}")
    return False


def _check_call(tokens: list[Token], k: int, allowed: frozenset[str]) -> None:
    nxt = tokens[k + 1] if k + 1 < len(tokens) else None
    if nxt is None or nxt.kind != "word":
        raise UnsafeCypherError(
            "CALL subqueries and bare CALL are not allowed in read-only queries", clause="CALL")
    parts = [nxt.text]
    j = k + 2
    while j + 1 < len(tokens) and tokens[j].text == "." and tokens[j + 1].kind == "word":
        parts.append(tokens[j + 1].text)
        j += 2
    name = ".".join(parts)
    if name.lower().startswith("apoc."):
        raise UnsafeCypherError(f"APOC procedure {name} is not allowed", clause="CALL")
    if name.lower() not in {p.lower() for p in allowed}:
        listed = ", ".join(sorted(allowed)) or "none"
        raise UnsafeCypherError(
            f"CALL {name} is not allowed: procedure not on the allow-list (allowed: {listed})",
            clause="CALL")


def _check_tokens(tokens: list[Token], allowed: frozenset[str]) -> None:
    depth = 0
    for k, tok in enumerate(tokens):
        if tok.kind == "punct":
            if tok.text in "([{":
                depth += 1
            elif tok.text in ")]}":
                depth -= 1
                if depth < 0:
                    raise UnsafeCypherError(f"unbalanced {tok.text!r} at offset {tok.start}",
                                            repairable=True)
            elif tok.text == ";" and k + 1 < len(tokens):
                raise UnsafeCypherError(
                    f"multiple statements are not allowed (';' followed by "
                    f"{tokens[k + 1].text[:20]!r})", clause=tokens[k + 1].upper or None)
            continue
        if tok.kind != "word" or _is_name_position(tokens, k):
            continue
        word = tok.upper
        if word == "APOC" and k + 1 < len(tokens) and tokens[k + 1].text == ".":
            raise UnsafeCypherError("APOC procedures and functions are not allowed", clause="APOC")
        if word == "CALL":
            _check_call(tokens, k, allowed)
        elif word in WRITE_KEYWORDS:
            what = WRITE_KEYWORDS[word]
            if word == "LOAD" and k + 1 < len(tokens) and tokens[k + 1].upper == "CSV":
                word = "LOAD CSV"
            raise UnsafeCypherError(f"{word} is not allowed in a read-only query ({what})",
                                    clause=word)
    if depth != 0:
        raise UnsafeCypherError("unbalanced brackets: a '(', '[' or '{' is never closed",
                                repairable=True)


def _limit_edits(tokens: list[Token], row_cap: int) -> list[tuple[int, int, str]]:
    """Text edits (start, end, replacement) that cap the final RETURN of every UNION part."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for k, tok in enumerate(tokens):
        if tok.kind == "punct" and tok.text in "([{":
            depth += 1
        elif tok.kind == "punct" and tok.text in ")]}":
            depth -= 1
        if depth == 0 and tok.upper == "UNION" and not _is_name_position(tokens, k):
            parts.append([])
            continue
        parts[-1].append(tok)
    edits: list[tuple[int, int, str]] = []
    for part in parts:
        depth, last_return, limit_at = 0, -1, -1
        for k, tok in enumerate(part):
            if tok.kind == "punct" and tok.text in "([{":
                depth += 1
            elif tok.kind == "punct" and tok.text in ")]}":
                depth -= 1
            elif depth == 0 and tok.upper == "RETURN" and not _is_name_position(part, k):
                last_return, limit_at = k, -1
            elif (depth == 0 and tok.upper == "LIMIT" and last_return >= 0
                  and not _is_name_position(part, k)):
                limit_at = k
        if last_return < 0:
            raise UnsafeCypherError("the query must end with a RETURN clause", repairable=True)
        if limit_at < 0:
            edits.append((part[-1].end, part[-1].end, f" LIMIT {row_cap}"))
            continue
        rest = part[limit_at + 1 :]
        if len(rest) != 1 or rest[0].kind != "number" or not rest[0].text.isdigit():
            raise UnsafeCypherError("LIMIT of the final RETURN must be an integer literal",
                                    clause="LIMIT", repairable=True)
        if int(rest[0].text) > row_cap:
            edits.append((rest[0].start, rest[0].end, str(row_cap)))
    return edits


def validate_cypher(query: str, *, row_cap: int = 200,
                    allowed_procedures: frozenset[str] = frozenset()) -> str:
    """Return the normalised, row-capped query, or raise UnsafeCypherError naming the problem.

    Only read queries pass: they start with MATCH, OPTIONAL MATCH, WITH, UNWIND, RETURN or an
    allow-listed CALL, contain no writing/administration clause outside literals, and are one
    statement (a trailing `;` is dropped). `LIMIT row_cap` is added to the final RETURN, or a
    bigger literal LIMIT is lowered to it.
    """
    if row_cap < 1:
        raise ValueError("row_cap must be at least 1")
    text = unicodedata.normalize("NFKC", query)
    tokens = tokenize(text)
    if not tokens:
        raise UnsafeCypherError("empty query", repairable=True)
    if tokens[-1].text == ";":
        text = text[: tokens[-1].start] + text[tokens[-1].end :]
        tokens = tokens[:-1]
        if not tokens:
            raise UnsafeCypherError("empty query", repairable=True)
    _check_tokens(tokens, allowed_procedures)
    first = tokens[0].upper
    if first not in _READ_STARTS:
        raise UnsafeCypherError(
            f"a read-only query must start with MATCH, OPTIONAL MATCH, WITH, UNWIND, RETURN or "
            f"CALL, not {tokens[0].text!r}", clause=first or None, repairable=not first)
    if first == "CALL" and not any(t.upper == "RETURN" for t in tokens):
        return text.strip()  # standalone allow-listed procedure; GraphTool caps the rows it reads
    for start, end, repl in sorted(_limit_edits(tokens, row_cap), reverse=True):
        text = text[:start] + repl + text[end:]
    return text.strip()


def cypher_literal(value: Any) -> str:
    """`value` as Cypher literal text that every engine we target parses back to the same value.

    Needed because FalkorDB's Bolt listener pastes parameters into the query text without
    escaping (measured: a value `x' RETURN 1 //` ran `RETURN 1`), so over Bolt parameters are
    inlined by us, escaped, and the result is validated like any other query text.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write the non-finite float {value!r} as a Cypher literal")
        return repr(value)
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch in _STRING_ESCAPES:
                out.append(_STRING_ESCAPES[ch])
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "'" + "".join(out) + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cypher_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            name = str(key)
            if not _PLAIN_NAME.fullmatch(name) or name.upper() in WRITE_KEYWORDS:
                name = "`" + name.replace("`", "``") + "`"
            items.append(f"{name}: {cypher_literal(item)}")
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"unsupported Cypher parameter type {type(value).__name__}")


def inline_parameters(query: str, params: dict[str, Any] | None) -> str:
    """Replace every `$name` outside strings and comments with the escaped literal of its value."""
    if not params:
        return query
    text = unicodedata.normalize("NFKC", query)
    pieces: list[str] = []
    last = 0
    for tok in tokenize(text):
        if tok.kind != "param":
            continue
        name = tok.text[1:]
        if name.startswith("`"):
            name = name[1:-1]
        if name not in params:
            raise UnsafeCypherError(f"parameter ${name} has no value", repairable=True)
        try:
            literal = cypher_literal(params[name])
        except ValueError as exc:
            raise UnsafeCypherError(f"parameter ${name}: {exc}", repairable=True) from exc
        pieces += [text[last : tok.start], literal]
        last = tok.end
    return "".join(pieces) + text[last:]


_AGGREGATE = re.compile(r"\b(count|sum|avg|min|max|collect)\s*\(", re.IGNORECASE)


def drop_conditions(query: str, values: list[str]) -> str | None:
    """`query` without the conditions that compare something to one of `values` (a property-map
    entry `{key: 'v'}`, or `x.p = 'v'` in a WHERE, with its AND), its final RETURN made DISTINCT
    when it has no aggregate (a node no longer pinned repeats the same answer once per match);
    None when a value is still there afterwards (it sat in a shape this does not read).

    Why: the text-to-Cypher fallback copies the schema's example values ("… {service_id:
    'payments-api'}") into questions that name no such record, and keeps them through repair;
    the question, asked without that condition, is what the user asked.
    """
    out = query
    for value in values:
        lit = "'" + re.escape(value.replace("\\", "\\\\").replace("'", "\\'")) + "'"
        entry = rf"\w+\s*:\s*{lit}"
        out = re.sub(rf"\s*\{{\s*{entry}\s*\}}", "", out)  # the only entry of a map
        out = re.sub(rf"{entry}\s*,\s*|\s*,\s*{entry}", "", out)  # one entry of several
        compare = rf"[\w.]+\s*=\s*{lit}|{lit}\s*=\s*[\w.]+"
        out = re.sub(rf"\s+AND\s+(?:{compare})|(?:{compare})\s+AND\s+", " ", out, flags=re.IGNORECASE)
        out = re.sub(rf"\bWHERE\s+(?:{compare})\s*(?=\b(?:RETURN|WITH|MATCH|OPTIONAL|ORDER|UNWIND)\b|$)", "",
                     out, flags=re.IGNORECASE)
    if out == query or any(f"'{v}'" in out for v in values):
        return None
    head, sep, tail = out.rpartition("RETURN")
    if sep and not _AGGREGATE.search(tail) and not re.match(r"\s+DISTINCT\b", tail, re.IGNORECASE):
        out = f"{head}RETURN DISTINCT{tail}"
    return out
