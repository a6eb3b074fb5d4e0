"""No tuning to the evaluation sets: no prompt, policy or lexicon restates a dev item.

`benchmarks/dev_leakage.py` lists every dev id, week, quarter, employee name, gold-query fragment
and restating phrase (a shared run of 4+ words that is long or covers most of a dev text) found in
`prompts/*.txt` and `policies/*.yaml`; this test fails on any. Everyday shared phrasing
("qual o status do") is reported as minor and allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from dev_leakage import Finding, failing, load_dev, scan, scan_text  # noqa: E402


def test_no_prompt_or_policy_restates_a_dev_item() -> None:
    from dev_leakage import default_files

    found = failing(scan(default_files()))
    assert not found, "\n".join(f"{f.file}:{f.line}: {f.kind} {f.text!r} (dev {f.dev_item})" for f in found)


def test_the_scan_finds_each_kind_of_leak() -> None:
    dev = load_dev()
    text = "\n".join([
        "Q: Qual é o orçamento do time de Plataforma para o 2026-Q3? -> sql",  # a dev question, near verbatim
        "compare ids exactly ('EXP-0150')",  # a dev id
        "weeks like o.week = '2026-W20'",  # a dev week in a gold comparison
        "paths: -[:DEPENDS_ON*1..6]->",  # a dev gold path bound
        "ask about Larissa Teixeira",  # a dev employee
    ])
    kinds = {f.kind for f in scan_text(text, "x.txt", dev)}
    assert {"ngram", "id", "week", "gold", "name", "quarter"} <= kinds, kinds


def test_generic_rules_pass() -> None:
    dev = load_dev()
    text = ("Give every variable-length pattern a numeric upper bound N: -[:REL*1..N]->.\n"
            "Compare ids exactly as stored; a period runs from its first day to its last day.\n"
            "o valor passou do limite de gastos")  # everyday phrasing shared with a dev turn: minor only
    found = scan_text(text, "x.txt", dev)
    assert not failing(found), found
    assert all(isinstance(f, Finding) for f in found)
