"""The rule-question classifier on probes: how many records questions it takes for rules, and how
many rule questions it finds, at the margin of `policies/planner.yaml` (and at others), and how many fall in its `near` band.

A records question over the margin goes to the documents alone and loses its data answer; a rule
question under it is matched by vocabulary, where the database's words often win. The probes
(`benchmarks/data/rule_probes.jsonl`) are questions written for this check, none taken from a
question set: `tuned-1` ones were looked at while the prototypes were chosen, `tuned-2` ones
(written after them) while the margin and the band were, and `held-out` ones were written last
and changed nothing, so their figure is the honest one.

    .venv/bin/python benchmarks/rule_margin.py [--probes FILE] [--data DIR] [-v]

The texts are masked as the planner masks them (the stores of `--data`, else TRAMITA_DATA_DIR).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

console = Console(highlight=False)
PROBES = Path(__file__).parent / "data" / "rule_probes.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=Path, default=PROBES)
    parser.add_argument("--data", type=Path, default=None, help="ingested data directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="every probe's lead")
    args = parser.parse_args(argv)
    from tools.services import Services
    from tramita.base.settings import Settings
    from tramita.core import planner_hints as ph

    services = Services(Settings.embedded(args.data) if args.data else Settings.from_env())
    index = ph.vocabulary_index(services, None)
    model = ph._default_embeddings()
    config = ph._file().rule_questions
    if config is None:
        console.print("policies/planner.yaml has no rule_questions: nothing to measure")
        return 1
    items = [json.loads(line) for line in args.probes.read_text(encoding="utf-8").splitlines() if line.strip()]
    leads = []
    for item in items:
        masked = index.masker.mask(item["question"])
        lead = ph.rule_lead(model.embed_query(masked), model) if ph._may_be_rule(masked) else None
        leads.append((item, lead))
        if args.verbose:
            shown = "names a record" if lead is None else f"{lead:+.4f}"
            console.print(f"{shown:>15}  {item['asks']:<7} {item['set']:<10} {item['question']}", soft_wrap=True)
    groups = list(dict.fromkeys(item["set"] for item in items))  # in the file's order
    for margin in sorted({config.margin, 0.014, 0.017, 0.020}):
        mark = " (configured)" if margin == config.margin else ""
        console.print(f"margin {margin:.3f}{mark}:")
        for group in groups:
            records = [lead for item, lead in leads if item["set"] == group and item["asks"] == "records"]
            rules = [lead for item, lead in leads if item["set"] == group and item["asks"] == "rule"]
            taken = sum(1 for lead in records if lead is not None and lead >= margin)
            found = sum(1 for lead in rules if lead is not None and lead >= margin)
            console.print(f"  {group:<10}  records taken for rules {taken}/{len(records)}; "
                          f"rule questions found {found}/{len(rules)}")
    if config.near is not None:
        console.print(f"near band {config.near:.3f}..{config.margin:.3f} (the documents join the text's own sources):")
        for group in groups:
            band = [item["asks"] for item, lead in leads if item["set"] == group and lead is not None
                    and config.near <= lead < config.margin]
            console.print(f"  {group:<10}  records {band.count('records')}, rule questions {band.count('rule')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
