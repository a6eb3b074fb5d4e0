"""The span rule (tramita/core/spans.py): free text is the user's own words.

Pure unit tests first (no model, no database): apology-only and hesitation-only messages fill
nothing, "desculpa, é o <id>" fills no reason, a real justification is stored verbatim, markers
("porque", "reason:", ":") give the span deterministically, a paraphrase is refused.

Then the REAL local model (marked `real_model`), 24 extraction calls: the model points at a span,
`llm_values` keeps only what is a span of the message, so every stored free-text value is the
user's words, and messages that are only an apology, a hesitation or an id fill nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tramita.core import spans
from tramita.core.extraction import grounded, marked_values

# ------------------------------------------------------------------------------ pure: the rule

APOLOGIES = [
    ("desculpa, é a EXP-0150", ["EXP-0150"]),
    ("foi mal, era o TCK-1010", ["TCK-1010"]),
    ("perdão, digitei errado, é o INC-2001", ["INC-2001"]),
    ("ah, desculpe, é pro 2026-Q3 e são menos 3000 dólares", ["2026-Q3", "3000"]),
    ("sorry, it's EXP-0042", ["EXP-0042"]),
    ("my bad, INC-2005", ["INC-2005"]),
    ("oops, sorry, SEV1", ["SEV1"]),
    ("sorry, plus 7000", ["7000"]),
]
HESITATIONS = ["hmm, peraí... um momento", "ah, deixa eu ver", "uh, hold on", "hmm, one second, let me check",
               "ok, obrigado", "thanks!"]


@pytest.mark.parametrize(("message", "others"), APOLOGIES, ids=[m for m, _ in APOLOGIES])
def test_an_apology_with_a_value_fills_no_free_text(message: str, others: list[str]) -> None:
    """The whole message (what a model tends to copy) restates the id or the apology: refused."""
    verdict = spans.verify(message, message, others)
    assert verdict.value is None, verdict
    assert not spans.has_content(message, others)


@pytest.mark.parametrize("message", HESITATIONS)
def test_a_hesitation_fills_nothing(message: str) -> None:
    assert spans.verify(message, message).value is None


def test_an_apology_before_a_real_reason_keeps_only_the_reason() -> None:
    msg = "desculpa, é a EXP-0150: o recibo está ilegível e sem CNPJ"
    assert spans.verify(msg, msg, ["EXP-0150"]).value == "o recibo está ilegível e sem CNPJ"


@pytest.mark.parametrize("reason", [
    "Hospedagem acima do teto da cidade, sem aprovação prévia do gestor",
    "O fornecedor mudou o preço da licença e o contrato vence em outubro",
    "Duplicate of a claim that was already paid last month",
    "Vendor invoice is missing the tax id, please resubmit with a valid one",
])
def test_a_real_justification_is_stored_verbatim(reason: str) -> None:
    assert spans.verify(reason, reason).value == reason


def test_the_value_is_the_messages_own_characters_not_the_copy() -> None:
    """A copy that changed case, accents or spacing is located; what is stored is the message's text."""
    msg = "O relatório de vendas não abre desde a atualização"
    verdict = spans.verify("o relatorio de  vendas nao abre", msg)
    assert verdict.value == "O relatório de vendas não abre"


def test_a_near_copy_snaps_to_the_span_and_a_paraphrase_is_refused() -> None:
    msg = "a fatura veio com o imposto errado e o cliente reclamou"
    near = spans.verify("a fatura veio com imposto errado e o cliente reclamou", msg)  # dropped an article
    assert near.value == msg
    assert spans.verify("the invoice had the wrong tax", msg).value is None  # translated
    assert spans.verify("cobrança com tributo incorreto", msg).value is None  # reworded
    assert spans.verify("erro de imposto na fatura do cliente", msg).value is None  # words reordered


def test_values_of_other_parameters_are_not_content() -> None:
    others = ["web-frontend", "P2"]
    msg = "é no web-frontend, P2"
    assert spans.verify(msg, msg, others).value is None
    msg2 = "é no web-frontend, o carrinho perde os itens"
    assert spans.verify(msg2, msg2, others).value == "o carrinho perde os itens"


def test_leading_value_clauses_are_trimmed_from_an_expense_description() -> None:
    others = ["transport", "18.20", "2026-05-10"]
    msg = "transport, 18.20 USD, 2026-05-10, bus from the airport to the office"
    assert spans.trim(msg, others) == "bus from the airport to the office"


def test_brackets_opened_inside_the_span_are_kept() -> None:
    msg = "migração do cluster de busca (PRJ-201)"
    assert spans.verify(msg, msg).value == msg


def test_is_span_is_case_accent_and_space_insensitive() -> None:
    said = ["rejeita a EXP-0100", "O  Recibo é de outra viagem"]
    assert spans.is_span("o recibo e de outra viagem", said)
    assert not spans.is_span("recibo de outra viagem", said)
    assert not spans.is_span(None, said)


# ---------------------------------------------------------------------------- pure: markers

@pytest.mark.parametrize(("message", "head", "tail", "kind"), [
    ("abre um chamado P3 no web-frontend: o carrinho perde os itens", "abre um chamado P3 no web-frontend",
     "o carrinho perde os itens", "colon"),
    ("rejeita a EXP-0100 porque a nota é de outro CNPJ", "rejeita a EXP-0100", "a nota é de outro CNPJ", "because"),
    ("reject EXP-0100 because the receipt is blurry", "reject EXP-0100", "the receipt is blurry", "because"),
    ("escala o INC-2001 pra SEV2, motivo: o checkout caiu para todos", "escala o INC-2001 pra SEV2",
     "o checkout caiu para todos", "label"),
    ("open a P4 ticket on search-service - results are stale", "open a P4 ticket on search-service",
     "results are stale", "dash"),
    ("reject EXP-0100, reason: personal trip", "reject EXP-0100", "personal trip", "label"),
])
def test_clear_markers(message: str, head: str, tail: str, kind: str) -> None:
    m = spans.marked(message)
    assert m is not None and m.kind == kind
    assert m.head == head and spans.head_clause(message) == head
    assert spans.trim(m.tail) == tail


@pytest.mark.parametrize("message", ["a reunião é às 10:30 amanhã", "veja http://example.com/x",
                                     "reatribui o TCK-1100 pro fulano, pode fazer direto"])
def test_no_clear_marker(message: str) -> None:
    assert spans.marked(message) is None
    assert spans.head_clause(message) == message


def test_a_label_names_its_parameter() -> None:
    m = spans.marked("pedido de +5000 pro SRE no 2026-Q3, justificativa: novos plantonistas no trimestre")
    assert m is not None and "justification" in m.params


def test_fit_cuts_a_long_span_at_a_clause_boundary() -> None:
    span = ("o login pelo SSO fica em loop depois da troca de senha, já limpei o cache e testei em dois navegadores "
            "diferentes, o problema continua e afeta o time todo de vendas")
    short = spans.fit(span, 120)
    assert short is not None and len(short) <= 120 and span.startswith(short)
    assert short == ("o login pelo SSO fica em loop depois da troca de senha, já limpei o cache e testei em dois "
                     "navegadores diferentes")  # the longest run of whole clauses that fits
    assert spans.fit("curto", 120) == "curto"


def test_grounded_free_text_is_the_span_rule() -> None:
    schema = {"type": "string", "minLength": 10}
    assert grounded("o recibo chegou fora do prazo", schema, "o recibo chegou fora do prazo, rejeita")
    assert not grounded("recibo atrasado", schema, "o recibo chegou fora do prazo")
    assert not grounded("desculpa, é a EXP-0150", schema, "desculpa, é a EXP-0150")


class _Spec:
    """The slice of a ToolSpec that `marked_values` reads."""

    def __init__(self, properties: dict[str, Any], required: list[str]) -> None:
        self.properties = properties
        self.required = required


TICKET = _Spec({"service_id": {"type": "string", "x-resolve": "service", "x-references": "services.service_id"},
                "title": {"type": "string", "minLength": 5, "maxLength": 120},
                "priority": {"type": "string", "enum": ["P1", "P2", "P3", "P4"]},
                "description": {"type": "string", "maxLength": 2000}}, ["service_id", "title", "priority"])
BUDGET = _Spec({"team_id": {"type": "string", "x-resolve": "team", "x-references": "teams.team_id"},
                "justification": {"type": "string", "minLength": 20}}, ["team_id", "justification"])


def test_marked_values_fill_the_required_free_text() -> None:
    msg = "abre um chamado P2 no web-frontend: o carrinho perde os itens ao trocar de aba"
    out = marked_values(TICKET, msg, ["title", "description"], ["web-frontend", "P2"])  # type: ignore[arg-type]
    assert out == {"title": "o carrinho perde os itens ao trocar de aba"}


def test_a_long_marked_span_gives_a_short_title_and_the_whole_description() -> None:
    long = ("o login pelo SSO fica em loop depois da troca de senha, já limpei o cache e testei em dois navegadores "
            "diferentes, o problema continua e afeta o time todo de vendas")
    out = marked_values(TICKET, f"abre um ticket P2 no auth-service: {long}", ["title", "description"],  # type: ignore[arg-type]
                        ["auth-service", "P2"])
    assert len(out["title"]) <= 120 and long.startswith(out["title"]) and out["title"].endswith("navegadores diferentes")
    assert out["description"] == long


def test_a_reason_label_fills_a_justification() -> None:
    msg = "mais 4000 pro SRE, motivo: renovação das licenças de observabilidade"
    out = marked_values(BUDGET, msg, ["justification"], ["SRE", "4000"])  # type: ignore[arg-type]
    assert out == {"justification": "renovação das licenças de observabilidade"}


def test_no_marker_no_free_text() -> None:
    assert marked_values(TICKET, "abre um chamado P2 no web-frontend", ["title"], []) == {}  # type: ignore[arg-type]


def test_the_policy_file_is_validated() -> None:
    rules = spans.span_rules()
    assert rules.fillers["apology"]["pt"] and rules.labels and rules.function_words["en"]
    assert all(isinstance(w, str) for ws in rules.function_words.values() for w in ws)  # YAML "no"/"on" quoted


# ---------------------------------------------------------------------------- the REAL model

# (tool, known args, pending parameter, message, expected) — expected None: the parameter stays
# pending; a string: the stored value must contain it (and always be a span of the message).
REAL_CASES: list[tuple[str, dict[str, Any], str, str, str | None]] = [
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason", "desculpa, é a EXP-0100", None),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason", "foi mal, me confundi", None),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason", "sorry, it's EXP-0100", None),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason", "hmm, one second", None),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason", "ah, peraí, deixa eu ver", None),
    ("escalate_incident", {"incident_id": "INC-2001", "new_severity": "SEV2"}, "reason", "oops, sorry, INC-2001", None),
    ("escalate_incident", {"incident_id": "INC-2001", "new_severity": "SEV2"}, "reason", "desculpe, SEV2 mesmo", None),
    ("request_budget_change", {"team_id": "T06", "quarter": "2026-Q4", "delta_usd": 5000}, "justification",
     "ah, desculpa, é pro 2026-Q4", None),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason",
     "A nota fiscal é de um restaurante fora da cidade da viagem", "restaurante fora da cidade"),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason",
     "The hotel invoice covers two guests but only one was travelling", "two guests"),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason",
     "passou do limite de transporte e não tem justificativa anexada", "limite de transporte"),
    ("escalate_incident", {"incident_id": "INC-2001", "new_severity": "SEV2"}, "reason",
     "O checkout está falhando para metade dos clientes desde as nove", "checkout"),
    ("escalate_incident", {"incident_id": "INC-2001", "new_severity": "SEV2"}, "reason",
     "Error rate on the payments gateway doubled in the last hour", "payments gateway"),
    ("escalate_incident", {"incident_id": "INC-2001", "new_severity": "SEV2"}, "reason",
     "desculpa a demora: a fila de notificações já tem mais de dez mil mensagens", "fila de notifica"),
    ("request_budget_change", {"team_id": "T06", "quarter": "2026-Q4", "delta_usd": 5000}, "justification",
     "Contratação de mais dois plantonistas para cobrir a Black Friday", "plantonistas"),
    ("request_budget_change", {"team_id": "T02", "quarter": "2026-Q3", "delta_usd": -8000}, "justification",
     "We moved the build farm to spot instances, so the reserved capacity is no longer needed", "spot instances"),
    ("request_budget_change", {"team_id": "T04", "quarter": "2026-Q4", "delta_usd": 12000}, "justification",
     "licença anual da ferramenta de catálogo de dados que o time de BI pediu", "catálogo de dados"),
    ("create_ticket", {"service_id": "web-frontend", "priority": "P3"}, "title",
     "o botão de pagar some no Safari do iPhone", "Safari"),
    ("create_ticket", {"service_id": "search-service", "priority": "P2"}, "title",
     "search results still show products that were removed yesterday", "search results"),
    ("create_ticket", {"service_id": "expense-portal", "priority": "P4"}, "title",
     "é no expense-portal, o upload de foto do recibo trava em 90%", "upload de foto"),
    ("submit_expense", {"category": "meals", "amount_usd": 38.5, "expense_date": "2026-05-12"}, "description",
     "almoço com o fornecedor de cloud para revisar o contrato", "fornecedor de cloud"),
    ("submit_expense", {"category": "transport", "amount_usd": 21, "expense_date": "2026-05-13"}, "description",
     "taxi from the train station to the customer's office", "train station"),
    ("approve_expense", {"expense_id": "EXP-0100"}, "comment",
     "pode aprovar, conferi o recibo com a fatura do hotel", "conferi o recibo"),
    ("reject_expense", {"expense_id": "EXP-0100"}, "reason",
     "It's a personal purchase, not a business expense at all", "personal purchase"),
]


FILLED: list[bool] = []


@pytest.fixture(scope="module")
def registry(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tool registry, on a copy of the pristine dataset (models shared with the pristine dir)."""
    from helpers_graph import copy_settings, prepare_data_dir

    from tools.services import Services

    os.environ.setdefault("TRAMITA_MODELS_DIR", str(pristine / "models"))
    work = tmp_path_factory.mktemp("spans")
    return Services(copy_settings(pristine, work, prepare_data_dir(pristine, work))).registry


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize(("tool", "known", "param", "message", "expected"), REAL_CASES,
                         ids=[f"{c[0]}:{c[3][:30]}" for c in REAL_CASES])
def test_the_real_model_only_points_at_spans(registry: Any, tool: str, known: dict[str, Any], param: str,
                                             message: str, expected: str | None) -> None:
    from tools.llm import Usage
    from tramita.core.extraction import llm_values

    spec = registry.get(tool)
    usage = Usage()
    got = llm_values(spec, known, message, [param], backend="local", today="2026-05-15", usage=usage,
                     others=[str(v) for v in known.values()])
    assert 1 <= usage.calls <= 2  # one call, retried once at most on an invalid reply
    value = got.get(param)
    if expected is None:
        assert value is None, f"{message!r} filled {param}={value!r}"
        return
    # the invariant holds on every case: what is stored is the user's own words, and the right ones;
    # whether the model pointed at the span at all is counted (a miss leaves the parameter pending)
    FILLED.append(value is not None)
    if value is not None:
        assert spans.is_span(value, [message]), f"{value!r} is not a span of {message!r}"
        assert expected.lower() in value.lower(), f"{value!r} lacks {expected!r}"


@pytest.mark.real_model
@pytest.mark.slow
def test_the_real_model_points_at_most_spans() -> None:
    """After the cases above: the model found the span in at least 85 % of the messages that
    carry one (a miss is re-asked, never stored wrong; at temperature 0 a reused prompt prefix can
    still flip a near-tie, so one case is not a reliable signal)."""
    if len(FILLED) < 10:
        pytest.skip("run together with test_the_real_model_only_points_at_spans")
    assert sum(FILLED) / len(FILLED) >= 0.85, FILLED


def test_a_copy_with_a_value_appended_keeps_only_the_users_words() -> None:
    """The model copies the clause and appends a value from elsewhere: the shared run is stored,
    with its unit sign; a reworded copy still fills nothing."""
    message = "é no billing-engine, a geração de boletos trava em 75%"
    moved = spans.verify("Geração de boletos trava em 75% no billing-engine", message, ["billing-engine"])
    assert moved.value == "geração de boletos trava em 75%"
    reworded = spans.verify("Boletos travando durante a geração no billing", message, ["billing-engine"])
    assert reworded.value is None
    assert spans.verify("o sistema de boletos está lento", message).value is None
