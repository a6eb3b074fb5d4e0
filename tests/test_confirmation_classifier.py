"""The confirmation-reply classifier (tramita/core/confirmation.py) with the project's real e5 model.

The error that must never happen is "confirm" for a reply that is not one; the guard tests use a
stub embedding that makes every reply look exactly like a confirmation prototype, so they show the
guards hold whatever the model says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tools.registry_models import RegistryError
from tramita.base.text import fold
from tramita.core.confirmation import (
    LABELS,
    PROTOTYPES_FILE,
    ConfirmationClassifier,
    ConfirmationPrototypes,
    e5_query_embedder,
    load_prototypes,
)

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = ROOT / "benchmarks" / "data" / "confirmation.jsonl"
CHOICES = ["P1", "P2", "P3", "P4", "SEV1", "SEV2", "SEV3", "meals", "transport", "lodging"]

CONFIRM = [
    ("sim", ()), ("yes", ()), ("pode seguir", ()), ("manda ver", ()), ("bora", ()), ("pode sim", ()),
    ("go for it", ()), ("sounds good, do it", ()), ("siim", ()), ("confrimo", ()), ("yse", ()),
    ("vai fundo", ()), ("pode executar sim", ()), ("yes, go ahead and submit it", ()), ("sure, proceed with that", ()),
    ("só essa mesma, pode", ("EXP-0412",)), ("EXP-0412 mesmo, pode mandar", ("EXP-0412",)),
]
REJECT = [
    ("não", ()), ("no", ()), ("esquece", ()), ("forget it", ()), ("pensando bem, não quero mais", ()),
    ("não, pode cancelar isso", ()), ("de jeito nenhum, cancela", ()), ("nah, never mind", ()), ("scrap it", ()),
    ("no way, cancel it", ()),
]
CORRECT = [
    ("sim, mas com prioridade P2", ("TCK-1301", "P3")), ("yes but make it P1", ("TCK-1301", "P3")),
    ("pode, mas muda a categoria pra transport", ("meals",)), ("na verdade é a EXP-0415", ("EXP-0414",)),
    ("não, é o TCK-1320", ("TCK-1321",)), ("actually make it SEV1", ("INC-2201", "SEV2")),
    ("no, the first one after all", ("EXP-0413",)),
]
OTHER = [
    ("se der, pode", ()), ("se o gestor aprovar, manda", ()), ("only if it's under 100", ()),
    ("as long as it's under budget, go", ()), ("ah claro, aprova aí né, como se fosse meu dinheiro", ()),
    ("yeah right, approve that", ()), ("pode?", ()), ("yes?", ()), ("qual o limite da política?", ()),
    ("quem vai aprovar depois?", ()), ("aprova também a EXP-0416", ("EXP-0414",)), ("show me the open incidents", ()),
    ("abre um chamado pro wifi", ()), ("talvez", ()), ("maybe later", ()),
]


@pytest.fixture(scope="module")
def e5() -> Any:
    from tools.embeddings import make_embeddings

    return make_embeddings()


@pytest.fixture(scope="module")
def clf(e5: Any) -> ConfirmationClassifier:
    return ConfirmationClassifier.from_file(e5_query_embedder(e5))


def test_embedder_is_e5_with_the_query_prompt(e5: Any) -> None:
    vectors = e5_query_embedder(e5)(["pode seguir", "no"])
    assert vectors.shape[0] == 2
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert np.allclose(vectors[0], e5.embed_query("pode seguir"), atol=1e-5)  # "query: " prompt, as embed_query
    assert not np.allclose(vectors[0], e5.embed_documents(["pode seguir"])[0], atol=1e-3)  # not "passage: "


@pytest.mark.parametrize(("label", "text", "pending"),
                         [(lab, t, p) for lab, cases in (("confirm", CONFIRM), ("reject", REJECT), ("correct", CORRECT),
                                                         ("other", OTHER)) for t, p in cases])
def test_label(clf: ConfirmationClassifier, label: str, text: str, pending: tuple[str, ...]) -> None:
    result = clf.classify(text, pending, CHOICES)
    assert result.label == label, (text, result)
    if label != "confirm":
        assert result.label != "confirm"


def test_hard_colloquial_assent_is_never_rejected(clf: ConfirmationClassifier) -> None:
    """The margin may leave "fechou" to the LLM, but never decide it as a cancel."""
    for text in ("fechou", "só essa mesma, pode"):
        assert clf.classify(text, ("EXP-0412",), CHOICES).label in ("confirm", "unsure")


def test_unsure_excludes_confirm_when_a_guard_forbids_it(clf: ConfirmationClassifier) -> None:
    result = clf.classify("hmm, P2", ("TCK-1301", "P3"), CHOICES)
    assert result.label != "confirm"
    assert "confirm" not in result.allowed


def test_batch_matches_single(clf: ConfirmationClassifier) -> None:
    texts = ["pode seguir", "sim, mas com prioridade P2", "go for it", "esquece"]
    pending = [("P3",)] * len(texts)
    batch = clf.classify_batch(texts, pending, CHOICES)
    assert [r.label for r in batch] == [clf.classify(t, p, CHOICES).label for t, p in zip(texts, pending, strict=True)]


# -- guards, whatever the model says -----------------------------------------------------------


def _always_confirm(prototypes: ConfirmationPrototypes) -> ConfirmationClassifier:
    """Every reply embeds exactly like a confirm prototype: the prototype stage says "confirm" with margin 1."""
    label_of = {ConfirmationClassifier._embedding_text(p, ()): lab for lab in LABELS for p in prototypes.prototypes.of(lab).all()}

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([np.eye(len(LABELS))[LABELS.index(label_of.get(t, "confirm"))] for t in texts])

    return ConfirmationClassifier(prototypes, embed)


@pytest.mark.parametrize(("text", "pending", "expected"), [
    ("joia, com prioridade P2", ("TCK-1301", "P3"), "correct"),  # a new enum value
    ("beleza, valor 45,90", ("54.90",), "correct"),  # a new number
    ("show, a EXP-0431", ("EXP-0430",), "correct"),  # a new id
    ("show, a EXP-0430", ("EXP-0430",), "confirm"),  # the pending id repeated
    ("beleza, 54,90 mesmo", ("54.90",), "confirm"),  # the pending amount, written the Brazilian way
    ("demais, se couber no orçamento", (), "other"),  # conditional
    ("uhum, unless it's paid", (), "other"),
    ("show, tô dentro?", (), "other"),  # question mark
    ("joia, até parece", (), "other"),  # sarcasm marker
    ("joia, aprova também a EXP-0431", ("EXP-0430",), "other"),  # additive: a new request
    ("joia, mas depois", (), "unsure"),  # contrast: not "confirm", and "confirm" was the only candidate
    ("não tem erro, joia", (), "unsure"),  # negation: the LLM decides
])
def test_guards_hold_against_a_confident_confirm(text: str, pending: tuple[str, ...], expected: str) -> None:
    result = _always_confirm(load_prototypes()).classify(text, pending, CHOICES)
    assert result.label == expected, (text, result)


# -- the prototypes file -----------------------------------------------------------------------


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "confirmation_prototypes.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def _shipped() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(PROTOTYPES_FILE.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d["prototypes"]["confirm"].update(de=["ja, bitte"]), "prototypes.confirm.de"),
    (lambda d: d.update(margin="big"), "margin"),
    (lambda d: d["prototypes"]["reject"].update(en=[]), "prototypes.reject.en"),
    (lambda d: d["cues"].pop("negation"), "cues.negation"),
])
def test_malformed_prototypes_name_file_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    data = _shipped()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(RegistryError, match=rf"{re.escape(str(path))}: field {re.escape(field)}: "):
        load_prototypes(path)


def test_a_prototype_in_two_classes_is_refused(tmp_path: Path) -> None:
    data = _shipped()
    data["prototypes"]["reject"]["pt"].append(data["prototypes"]["confirm"]["pt"][0])
    with pytest.raises(RegistryError, match="in both 'confirm' and 'reject'"):
        load_prototypes(_write(tmp_path, data))


def test_prototypes_are_not_benchmark_lines() -> None:
    """The benchmark is held out: no prototype may be one of its lines."""
    protos = load_prototypes()
    folded = {fold(p) for lab in LABELS for p in protos.prototypes.of(lab).all()}
    lines = [json.loads(line)["text"] for line in BENCHMARK.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) >= 320
    assert not [t for t in lines if fold(t) in folded]


@pytest.mark.parametrize("text", ["beleza, pode continuar", "yes, go on", "pode seguir"])
def test_a_bare_assent_while_collecting(clf: ConfirmationClassifier, text: str) -> None:
    assert clf.assent(text)


@pytest.mark.parametrize("text", ["comprar café para a copa", "lembrar de ligar pro cliente", "trocar a senha do wifi",
                                  "sim, a EXP-0210"])
def test_a_short_value_is_not_an_assent(clf: ConfirmationClassifier, text: str) -> None:
    """A note's text or a reason shaped like a short imperative is an answer, not a "go on"."""
    assert not clf.assent(text)
