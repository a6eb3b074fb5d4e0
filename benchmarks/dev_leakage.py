"""Dev-set leakage: does a prompt, policy or lexicon restate an evaluation (dev) item?

The dev files (`sample/novaops/questions.dev.jsonl`, `conversations.dev.jsonl`) measure how tramita
behaves on questions it was not tuned on; the README warns that a hidden holdout uses "different
entities and phrasing". A prompt example that paraphrases a dev question, a lexicon entry that
names a dev employee or a dialect note that copies a dev gold query's ids, weeks or path bounds
makes the dev figures flatter the holdout ones. This script lists every such overlap:

- `ngram`: a run of at least `--n` (4) words shared with a dev question or conversation turn
  (folded: case, accents and punctuation ignored) that restates it: the run is at least
  `RESTATE_WORDS` (6) words long or covers at least half of that dev text. Shorter shared runs of
  everyday phrasing ("qual o status do") are listed as `ngram-minor` and do not fail the check;
- `id`: an entity id that a dev item names, or the id of an employee it names by name (EXP-0264,
  INC-2047, E006, PRJ-102, BR-0001, TCK-1092…);
- `week` / `quarter`: an ISO week or quarter a dev item names (2026-W20, 2026-Q3);
- `name`: the full name of an employee that a dev item names;
- `gold`: a fragment of a dev gold query: a quoted date/id literal ('2026-03-31', 'EXP-0150'), a
  variable-length path bound (*1..6) or a literal comparison (s.tier = 1) copied from it.

    .venv/bin/python benchmarks/dev_leakage.py [FILE ...] [--n 4] [--json]

Without files it scans `prompts/*.txt`, `policies/*.yaml`, the semantic model, the graph patterns and the API
sources of the sample. Exit status 1 when anything is
found other than `ngram-minor`. `tests/test_no_dev_leakage.py` runs `scan` over the same files.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tramita.base.paths import SAMPLE_DIR
from tramita.base.text import fold

ROOT = Path(__file__).resolve().parents[1]
DEV_FILES = ("questions.dev.jsonl", "conversations.dev.jsonl")
DEFAULT_GLOBS = ("prompts/*.txt", "policies/*.yaml", "sample/novaops/semantic_model.yaml",
                 "sample/novaops/graph_patterns.yaml", "sample/novaops/api/*.yaml")
# data, not tuning: files that hold the deployment's own configuration and would name dev
# entities whatever the dev items asked (the reason is printed with the scan)
NOT_SCANNED = {
    "policies/groups.yaml": "who belongs to which permission group: the business contract of sample/novaops/tools.md",
}
RESTATE_WORDS = 6
RESTATE_SHARE = 0.5
MINOR = "ngram-minor"

_ID = re.compile(r"\b(?:[A-Z]{2,4}-\d{2,5}|E\d{3}|T\d{2})\b")
_WEEK = re.compile(r"\b\d{4}-W\d{2}\b")
_QUARTER = re.compile(r"\b\d{4}-Q[1-4]\b")
_QUOTED = re.compile(r"'([^']+)'")
_BOUND = re.compile(r"\*\s*\d*\s*\.\.\s*\d+")
_COMPARISON = re.compile(r"\b\w+\.\w+\s*(?:=|<>|>=|<=|>|<)\s*\d+\b")
# a quoted literal worth flagging: a date, timestamp, week, quarter or entity id (not enum words
# such as 'approved' or 'SEV1', which are the schema's vocabulary)
_DISTINCT_LITERAL = re.compile(r"^(?:\d{4}-\d{2}-\d{2}.*|\d{4}-[WQ]\d+|[A-Z]{2,4}-\d{2,5}|E\d{3}|T\d{2})$")


@dataclass(frozen=True)
class Finding:
    """One overlap between a scanned file and a dev item."""

    file: str
    line: int
    kind: str
    text: str
    dev_item: str


@dataclass
class DevSet:
    """What the dev items say, in the forms the scan compares."""

    ngrams: dict[tuple[str, ...], list[tuple[str, int]]]  # folded n-gram → (dev item id, words of that text)
    ids: dict[str, str]
    weeks: dict[str, str]
    quarters: dict[str, str]
    names: dict[str, str]  # folded full name → dev item id
    gold_fragments: dict[str, str]  # normalised fragment → dev item id
    n: int


def _dev_texts(sample: Path) -> Iterator[tuple[str, str, str]]:
    """(item id, field, text) for every user-facing text and gold query of the dev files."""
    for name in DEV_FILES:
        path = sample / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            ident = str(item.get("id"))
            if "question" in item:
                yield ident, "question", str(item["question"])
            for turn in item.get("turns", []):
                yield ident, "turn", str(turn.get("user", ""))
            for key in ("gold_sql", "gold_cypher"):
                if item.get(key):
                    yield ident, key, str(item[key])
            for check in item.get("final_db", []):
                yield ident, "final_db", str(check.get("sql", ""))


def _employees(sample: Path) -> dict[str, str]:
    """Folded full name → employee id."""
    path = sample / "data" / "employees.csv"
    if not path.exists():
        return {}
    with path.open(encoding="utf-8", newline="") as fh:
        return {fold(row["full_name"]): row["employee_id"] for row in csv.DictReader(fh)}


def _gram(words: list[str], n: int) -> Iterator[tuple[str, ...]]:
    for i in range(len(words) - n + 1):
        yield tuple(words[i:i + n])


def _norm_fragment(text: str) -> str:
    return re.sub(r"\s+", "", text)


def load_dev(sample: Path = SAMPLE_DIR, n: int = 4) -> DevSet:
    """Index the dev files of `sample` for `scan`."""
    dev = DevSet({}, {}, {}, {}, {}, {}, n)
    names = _employees(sample)
    for ident, field, text in _dev_texts(sample):
        is_query = field in ("gold_sql", "gold_cypher", "final_db")
        if not is_query:
            words = fold(text).split()
            for g in _gram(words, n):
                dev.ngrams.setdefault(g, []).append((ident, len(words)))
            folded = f" {fold(text)} "
            for key in names:
                if f" {key} " in folded:
                    dev.names.setdefault(key, ident)
        for m in _ID.finditer(text):
            dev.ids.setdefault(m.group(0), ident)
        for m in _WEEK.finditer(text):
            dev.weeks.setdefault(m.group(0), ident)
        for m in _QUARTER.finditer(text):
            dev.quarters.setdefault(m.group(0), ident)
        if is_query:
            for m in _QUOTED.finditer(text):
                if _DISTINCT_LITERAL.match(m.group(1)):
                    dev.gold_fragments.setdefault(_norm_fragment(f"'{m.group(1)}'"), ident)
            for pattern in (_BOUND, _COMPARISON):
                for m in pattern.finditer(text):
                    dev.gold_fragments.setdefault(_norm_fragment(m.group(0)), ident)
            for m in _QUOTED.finditer(text):  # names in gold queries ('Larissa Teixeira')
                if fold(m.group(1)) in names:
                    dev.names.setdefault(fold(m.group(1)), ident)
    for key, ident in dev.names.items():  # a named person's id restates the item as much as the name
        dev.ids.setdefault(names[key], ident)
    return dev


def scan_text(text: str, file: str, dev: DevSet) -> list[Finding]:
    """Every overlap of one file's text with the dev set, line by line (n-grams across the
    whole text, reported at the line where they start).
    """
    found: list[Finding] = []
    lines = text.splitlines()
    for no, line in enumerate(lines, start=1):
        for m in _ID.finditer(line):
            if m.group(0) in dev.ids:
                found.append(Finding(file, no, "id", m.group(0), dev.ids[m.group(0)]))
        for m in _WEEK.finditer(line):
            if m.group(0) in dev.weeks:
                found.append(Finding(file, no, "week", m.group(0), dev.weeks[m.group(0)]))
        for m in _QUARTER.finditer(line):
            if m.group(0) in dev.quarters:
                found.append(Finding(file, no, "quarter", m.group(0), dev.quarters[m.group(0)]))
        folded = f" {fold(line)} "
        for key, ident in dev.names.items():
            if f" {key} " in folded:
                found.append(Finding(file, no, "name", key, ident))
        compact = _norm_fragment(line)
        for frag, ident in dev.gold_fragments.items():
            if _fragment_in(frag, compact):
                found.append(Finding(file, no, "gold", frag, ident))
    found.extend(_ngram_findings(lines, file, dev))
    return found


def _fragment_in(frag: str, compact: str) -> bool:
    """A gold fragment as a whole token of the line (so *1..6 is not found in *1..60, nor
    s.tier=1 in s.tier=10); edges that are punctuation need no boundary.
    """
    before = r"(?<![\w.])" if re.match(r"[\w.]", frag) else ""
    after = r"(?![\w.])" if re.search(r"[\w.]$", frag) else ""
    return re.search(before + re.escape(frag) + after, compact) is not None


def _ngram_findings(lines: list[str], file: str, dev: DevSet) -> list[Finding]:
    """Maximal runs of shared n-grams, one finding per run: `ngram` when the run restates a dev
    text (long, or most of it), else `ngram-minor`.
    """
    words: list[tuple[str, int]] = [(w, no) for no, line in enumerate(lines, start=1) for w in fold(line).split()]
    out: list[Finding] = []
    i = 0
    while i <= len(words) - dev.n:
        gram = tuple(w for w, _ in words[i:i + dev.n])
        if gram not in dev.ngrams:
            i += 1
            continue
        j = i + 1
        while j <= len(words) - dev.n and tuple(w for w, _ in words[j:j + dev.n]) in dev.ngrams:
            j += 1
        run = [w for w, _ in words[i:j + dev.n - 1]]
        owners = {o for k in range(i, j) for o in dev.ngrams[tuple(w for w, _ in words[k:k + dev.n])]}
        ident, size = max(owners, key=lambda o: len(run) / o[1])
        restates = len(run) >= RESTATE_WORDS or len(run) >= RESTATE_SHARE * size
        out.append(Finding(file, words[i][1], "ngram" if restates else MINOR, " ".join(run), ident))
        i = j + dev.n - 1
    return out


def default_files(root: Path = ROOT) -> list[Path]:
    """The prompts, policies and lexicons the test guards (`NOT_SCANNED` left out)."""
    return sorted(p for g in DEFAULT_GLOBS for p in root.glob(g) if str(p.relative_to(root)) not in NOT_SCANNED)


def scan(files: Iterable[Path], dev: DevSet | None = None, root: Path = ROOT) -> list[Finding]:
    """Every finding in `files` (paths shown relative to `root` when inside it)."""
    dev = dev or load_dev()
    out: list[Finding] = []
    for path in files:
        try:
            name = str(path.resolve().relative_to(root))
        except ValueError:
            name = str(path)
        out.extend(scan_text(path.read_text(encoding="utf-8"), name, dev))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--n", type=int, default=4, help="shortest shared word run reported")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.files:
        for name, why in NOT_SCANNED.items():
            print(f"not scanned: {name} ({why})")
    findings = scan(args.files or default_files(), load_dev(n=args.n))
    if args.json:
        print(json.dumps([asdict(f) for f in findings], ensure_ascii=False, indent=1))
    else:
        for f in findings:
            print(f"{f.file}:{f.line}: {f.kind} {f.text!r} (dev {f.dev_item})")
        print(f"{len(failing(findings))} finding(s) restate a dev item; "
              f"{len(findings) - len(failing(findings))} minor shared phrase(s)")
    return 1 if failing(findings) else 0


def failing(findings: list[Finding]) -> list[Finding]:
    """The findings that restate a dev item (everything but `ngram-minor`)."""
    return [f for f in findings if f.kind != MINOR]


if __name__ == "__main__":
    raise SystemExit(main())
