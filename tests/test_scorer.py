"""The strict scorer: every rule has a WRONG answer that must fail and a right one that passes.

Why: an eval that passes a wrong answer hides regressions. Each rule of
`tramita.lab.evaluation.facts` and of the strict execution comparison is pinned here by a pair.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tramita.lab.evaluation.facts import fact_in, leaks, numbers_in
from tramita.lab.evaluation.questions import cell_matches, results_match

# ------------------------------------------------------------------------------- text facts


@pytest.mark.parametrize(("fact", "right", "wrong"), [
    ("Ana", "Quem aprovou foi a Ana Souza.", "Quem aprovou foi a Mariana Figueiredo."),
    ("EXP-011", "A despesa EXP-011 foi aprovada.", "A despesa EXP-0110 foi aprovada."),
    ("INC-2055", "O INC-2055 estourou o SLA.", "O INC-20551 estourou o SLA."),
    ("SEV2", "Severidade SEV2.", "Severidade SEV21."),
    ("São Paulo", "Escritório de sao paulo: 25.", "Escritório: São Paulinho."),
    ("Lucas Oliveira", "o comandante foi LUCAS OLIVEIRA", "o comandante foi Lucas Oliveiras"),
])
def test_text_facts_match_whole_words_only(fact: str, right: str, wrong: str) -> None:
    assert fact_in(fact, right)
    assert not fact_in(fact, wrong)


def test_commands_match_exactly() -> None:
    assert fact_in("cmctl renew -n auth auth-mtls", "Rode `cmctl renew -n auth auth-mtls`.")
    assert not fact_in("cmctl renew -n auth auth-mtls", "Rode cmctl renew -n auth auth-mtls2.")


# ---------------------------------------------------------------------------- number tokens


def test_digits_separated_by_spaces_are_never_joined() -> None:
    assert not fact_in("8030", "limite de 80 30 dias")
    assert not fact_in("1234", "foram 1 234 registros")
    assert fact_in("80", "limite de 80 por 30 dias") and fact_in("30", "limite de 80 por 30 dias")


@pytest.mark.parametrize(("fact", "wrong"), [
    ("264", "A despesa EXP-0264 foi aprovada."),
    ("2047", "O postmortem do INC-2047 diz isso."),
    ("6", "Quem aprovou foi E006."),
    ("20", "Na semana 2026-W20 o primário é Caio."),
    ("2026", "Na semana 2026-W20 o primário é Caio."),
    ("3", "O orçamento de 2026-Q3 do time."),
    ("15", "Aberto em 2026-05-15 às 10:00."),
    ("5", "Aberto em 2026-05-15."),
    ("31", "Prazo: 31/03/2026."),
    ("16", "Deploys até 16:00."),
    ("6", "Aconteceu em 6 de maio."),
    ("6", "It happened on May 6, at night."),
    ("2", "Prioridade P2, severidade SEV2."),
])
def test_numbers_inside_ids_dates_weeks_and_quarters_are_not_facts(fact: str, wrong: str) -> None:
    assert not fact_in(fact, wrong), numbers_in(wrong)


def test_plain_numbers_next_to_ids_still_count() -> None:
    assert fact_in("2", "O INC-2047 afetou 2 serviços.")
    assert fact_in("14", "Em 2026-W20 foram 14 tickets.")


# --------------------------------------------------------------------------- numeric values


def test_a_numeric_fact_matches_only_at_two_decimals() -> None:
    assert not fact_in("17.3", "The average is 17.27 minutes.")  # a different figure, not a rounded form
    assert not fact_in("17.3", "The average is 17.4 minutes.")
    assert fact_in("17.3", "The average is 17.3 minutes.") and fact_in("17.3", "A média é 17,30 minutos.")
    assert fact_in("2424.47", "total 2424.4712")  # two decimals given: the same number at that precision
    assert not fact_in("2424.47", "total 2424.5")
    assert not fact_in("44", "43.99") and fact_in("44", "São 44.")


@pytest.mark.parametrize("text", ["US$ 2.424,47", "$2,424.47", "2424,47 dólares", "2.424,47", "USD 2,424.47"])
def test_thousands_separators_in_both_styles(text: str) -> None:
    assert fact_in("2424.47", text)


def test_thousands_grouping_must_be_valid() -> None:
    assert fact_in("470000", "470.000,00 dólares") and fact_in("470000", "470,000") and fact_in("470000", "470 mil")
    assert fact_in("1234567.89", "1.234.567,89") and fact_in("1234567.89", "1,234,567.89")
    assert not fact_in("23183.12", "o total é 23.183.12")  # malformed: not a number at all
    assert numbers_in("23.183.12") == []
    assert fact_in("0.25", "US$ 0,25 por km") and fact_in("3271", "3,271 minutes")


def test_multipliers_and_units() -> None:
    assert fact_in("215000", "up to 215k") and fact_in("2410000", "2,41 milhões")
    assert fact_in("80", "80% do tempo") and not fact_in("80", "800%")
    assert numbers_in("44 despesas, 3 times") == [Decimal(44), Decimal(3)]


# ------------------------------------------------------------------------------- leaks


@pytest.mark.parametrize("bad", ["[SQL] rows: [{\"n\": 44}]", "A consulta voltou (no rows).",
                                  "query: SELECT 1", "Erro: OperationalError: no such table",
                                  "Traceback (most recent call last):", "The query [SQL] 2 results:\nname | role",
                                  "[graph] no matching records.", "s.service_id | COUNT(i._ID)\nledger-service | 1",
                                  "There are 3: [api:listServiceStatuses] data: service_id: api-gateway"])
def test_leaks_are_found(bad: str) -> None:
    assert leaks(bad)


def test_clean_answers_have_no_leaks() -> None:
    assert leaks("Há 44 despesas pendentes [SQL].") == []
    assert leaks("An error budget of 0.1% applies [doc-pol-incident-sla].") == []


# --------------------------------------------------------------------- execution accuracy


def test_strict_execution_needs_the_same_columns() -> None:
    gold = [("a", 1), ("b", 2)]
    extra = [(1, "a", "x"), (2, "b", "y")]
    assert results_match(gold, extra)  # relaxed: an extra column is harmless
    assert not results_match(gold, extra, strict=True)  # strict: same columns
    assert results_match(gold, [(2, "b"), (1, "a")], strict=True)  # any column and row order
    assert not results_match(gold, [(1, "a"), (3, "b")], strict=True)


def test_strict_execution_compares_numbers_at_two_decimals() -> None:
    assert cell_matches(17.3, 17.2857) and not cell_matches(17.3, 17.2857, strict=True)
    assert cell_matches(2424.47, 2424.4700000000003, strict=True)
    assert cell_matches(612, "612.00", strict=True) and not cell_matches(6, 6.4, strict=True)
    # an average summed in another order carries float noise below the precision: SQL's ROUND says
    # 1716.85 for the same 1716.845; a value really below the half still fails
    assert cell_matches(1716.85, 1716.8449999999998, strict=True) and cell_matches(1716.85, 1716.8449999999998)
    assert not cell_matches(1716.85, 1716.844, strict=True) and not cell_matches(51.22, 51.2149, strict=True)


def test_summary_reports_strict_beside_relaxed_and_counts_leaks(tmp_path: Path) -> None:
    from tramita.lab.evaluation.questions import summarize
    from tramita.lab.evaluation.report import write_reports

    def rec(i: str, strict: bool, answer: str) -> dict[str, object]:
        return {"id": i, "ok": True, "question": "q", "lang": "pt", "needs": ["sql"], "answer": answer, "status": "idle",
                "checks": {"sql_execution": True, "clean_answer": not leaks(answer)}, "facts": {}, "plan": {},
                "plan_matches_needs": True, "sql": {"correct": True, "correct_strict": strict}, "cypher": {},
                "docs": [], "doc_recall": None, "leaks": leaks(answer), "refused": False, "tables_changed": [],
                "trace": {}, "seconds": 0.1}

    records = [rec("a", True, "São 44 [SQL]."), rec("b", False, "[SQL] rows: [[44]]")]
    s = summarize(records)
    assert s["backends"]["sql_execution_accuracy"] == 1.0
    assert s["backends"]["sql_execution_accuracy_strict"] == 0.5
    assert s["answers_with_leaks"] == 1
    json_path, html_path = write_reports(tmp_path, kind="questions", file="x.jsonl", profile="scripted",
                                         summary=s, records=records)
    import json

    payload = json.loads(json_path.read_text(encoding="utf-8"))
    assert payload["summary"]["answer_leaks"]["answers"] == 1
    assert payload["summary"]["answer_leaks"]["where"][0]["id"] == "b"
    assert "answers showing raw rows, labels or exception text" in html_path.read_text(encoding="utf-8")
