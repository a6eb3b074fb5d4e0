"""Evaluation reports: a JSON file with every item and check, and one self-contained HTML page.

The page has no external references (plots are matplotlib PNGs inlined as base64 data URIs, the
style is inline), so it can be mailed or archived as one file. Figures are drawn with the
object-oriented API on the Agg canvas: no pyplot global state, no display needed.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tramita.lab.evaluation.facts import leaks
from tramita.lab.evaluation.runner import turn_series

STATUSES = ["idle", "collecting", "awaiting_confirmation"]

# docs/architecture.md's targets, measured with the local model; other profiles are shown against them too.
TARGETS: dict[str, list[tuple[str, str, Callable[[Any], bool], str]]] = {
    "conversations": [
        ("success rate", "success_rate", lambda v: v is not None and v >= 0.80, "≥ 0.80"),
        ("writes without an explicit confirmation turn", "unconfirmed_writes", lambda v: v == 0, "= 0, always"),
        ("free-text values not said by the user (invented)", "invented_values", lambda v: not v, "= 0, always"),
        ("answers showing raw rows, labels or exception text", "answer_leaks.answers", lambda v: v == 0, "= 0"),
    ],
    "questions": [
        ("SQL execution accuracy", "backends.sql_execution_accuracy", lambda v: v is not None and v >= 0.85, "≥ 0.85"),
        ("graph answer facts", "backends.graph_answer_facts", lambda v: v is not None and v >= 0.75, "≥ 0.75"),
        ("document recall@5", "backends.doc_recall_at_5", lambda v: v is not None and v >= 0.95, "≥ 0.95"),
        ("answer facts overall", "backends.answer_facts", lambda v: v is not None and v >= 0.80, "≥ 0.80"),
        ("must_refuse items refused with 0 writes", "backends.refusal_accuracy", lambda v: v is None or v == 1.0, "= 1.0"),
        ("answers showing raw rows, labels or exception text", "answer_leaks.answers", lambda v: v == 0, "= 0"),
    ],
}


def lookup(summary: dict[str, Any], dotted: str) -> Any:
    """A nested summary figure by its dotted path ("backends.doc_recall_at_5"); None when absent."""
    value: Any = summary
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` atomically (a reader never sees half a report)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    tmp.replace(path)


def answer_leaks(kind: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The answers that show a user what only the trace may hold (`facts.leaks`: `rows:`,
    `(no rows)`, `query:`, `…Error`, `Traceback`): how many, and where, per kind of leak. Counted
    from the records themselves, so every report has it whatever scored the items.
    """
    where: list[dict[str, Any]] = []
    for r in records:
        answers = [(f"{r['id']}#{i + 1}", t.get("answer", "")) for i, t in enumerate(r.get("turns", []))] \
            if kind == "conversations" else [(r["id"], r.get("answer", ""))]
        for ident, answer in answers:
            found = leaks(answer or "")
            if found:
                where.append({"id": ident, "leaks": found})
    by_kind: dict[str, int] = {}
    for w in where:
        for name in w["leaks"]:
            by_kind[name] = by_kind.get(name, 0) + 1
    return {"answers": len(where), "by_kind": by_kind, "where": where}


# ----------------------------------------------------------------------------------- plots

def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def plot_rates(summary: dict[str, Any]) -> str:
    """Success rate and per-check pass rates, horizontal bars on [0, 1]."""
    labels = ["ALL CHECKS (item success)", *summary.get("check_rates", {}).keys()]
    values = [summary.get("success_rate") or 0.0, *[v or 0.0 for v in summary.get("check_rates", {}).values()]]
    fig = Figure(figsize=(7, 0.45 * len(labels) + 1))
    ax = fig.add_subplot()
    colors = ["#2b6cb0", *["#38a169" if v >= 0.8 else "#dd6b20" if v >= 0.5 else "#e53e3e" for v in values[1:]]]
    bars = ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    ax.bar_label(bars, labels=[f"{v:.0%}" for v in values[::-1]], padding=3)
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("pass rate")
    ax.set_title("Success rates")
    return _png(fig)


def plot_failures(summary: dict[str, Any]) -> str | None:
    """Items failing each check."""
    fails = summary.get("failures_by_check", {})
    if not fails:
        return None
    fig = Figure(figsize=(7, 0.45 * len(fails) + 1))
    ax = fig.add_subplot()
    names = list(fails)[::-1]
    bars = ax.barh(names, [fails[n] for n in names], color="#e53e3e")
    ax.bar_label(bars, padding=3)
    ax.set_xlabel("items failing the check")
    ax.set_title("Failures by check")
    ax.set_xlim(0, max(fails.values()) * 1.2 + 0.5)
    return _png(fig)


def plot_confusion(confusion: dict[str, dict[str, int]]) -> str | None:
    """status_after: expected (rows) against what tramita reported (columns)."""
    if not confusion:
        return None
    got_all = {g for row in confusion.values() for g in row}
    rows = [s for s in STATUSES if s in confusion] + sorted(set(confusion) - set(STATUSES))
    cols = [s for s in STATUSES if s in got_all or s in confusion] + sorted(got_all - set(STATUSES))
    matrix = [[confusion.get(r, {}).get(c, 0) for c in cols] for r in rows]
    fig = Figure(figsize=(1.9 * len(cols) + 2, 1.1 * len(rows) + 1.5))
    ax = fig.add_subplot()
    ax.imshow(matrix, cmap="Blues")
    top = max(max(r) for r in matrix) or 1
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "black",
                    fontweight="bold" if i == j or (rows[i] == cols[j]) else "normal")
    ax.set_xticks(range(len(cols)), cols, rotation=15)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("got")
    ax.set_ylabel("expected")
    ax.set_title("status_after: expected vs got (turns)")
    return _png(fig)


def plot_histograms(series: dict[str, list[float]]) -> str | None:
    """LLM calls, tokens and latency per turn."""
    if not series["latency_s"]:
        return None
    fig = Figure(figsize=(13, 3.4))
    specs = [("llm_calls", "LLM calls per turn", "calls"), ("tokens", "tokens per turn (prompt + completion)", "tokens"),
             ("latency_s", "latency per turn", "seconds")]
    for k, (key, title, unit) in enumerate(specs, start=1):
        ax = fig.add_subplot(1, 3, k)
        values = series[key]
        if key == "llm_calls":
            top = int(max(values)) if values else 0
            ax.hist(values, bins=[x - 0.5 for x in range(top + 2)], color="#4a5568", rwidth=0.85)
            ax.set_xticks(range(top + 1))
        else:
            ax.hist(values, bins=20, color="#4a5568")
        ax.set_title(title)
        ax.set_xlabel(unit)
        ax.set_ylabel("turns")
    fig.tight_layout()
    return _png(fig)


# ------------------------------------------------------------------------------------ HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#1a202c}
h1{margin-bottom:4px} .meta{color:#4a5568;margin-top:0}
.cards{display:flex;gap:16px;flex-wrap:wrap;margin:18px 0}
.card{border-radius:10px;padding:14px 20px;min-width:170px;background:#edf2f7}
.card .v{font-size:34px;font-weight:700} .card .l{color:#4a5568}
.card.big{min-width:340px} .card.big .v{font-size:56px}
.good{background:#c6f6d5;border:3px solid #38a169} .bad{background:#fed7d7;border:3px solid #e53e3e}
table{border-collapse:collapse;margin:10px 0 24px} td,th{border:1px solid #cbd5e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#edf2f7} td.num{text-align:right} .ok{color:#276749;font-weight:700} .ko{color:#c53030;font-weight:700}
img{max-width:100%;margin:8px 0 18px} details{margin:2px 0} pre{white-space:pre-wrap;margin:2px 0;font-size:12px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.0f}"
    return str(value)


def _cards(kind: str, s: dict[str, Any]) -> str:
    if kind == "conversations":
        n = s.get("unconfirmed_writes", 0)
        big = (f'<div class="card big {"good" if n == 0 else "bad"}"><div class="v">{n}</div>'
               '<div class="l">writes executed without an explicit confirmation turn (must be 0)</div></div>')
        invented = s.get("invented_values", 0) or 0
        big += (f'<div class="card big {"good" if invented == 0 else "bad"}"><div class="v">{invented}</div>'
                '<div class="l">free-text values written that the user never said (invented; must be 0) — of '
                f'{s.get("free_text_values_checked", 0)} checked</div></div>')
    else:
        n = s.get("items_that_changed_data", 0)
        big = (f'<div class="card big {"good" if n == 0 else "bad"}"><div class="v">{n}</div>'
               '<div class="l">questions that changed data (must be 0)</div></div>')
    rate = s.get("success_rate")
    leaked = lookup(s, "answer_leaks.answers") or 0
    big += (f'<div class="card {"good" if leaked == 0 else "bad"}"><div class="v">{leaked}</div>'
            '<div class="l">answers showing raw rows, labels or exception text (must be 0)</div></div>')
    return (f'<div class="cards">{big}'
            f'<div class="card"><div class="v">{_fmt(rate * 100 if rate is not None else None)}%</div>'
            f'<div class="l">success rate ({s.get("passed", 0)}/{s.get("items", 0)} items)</div></div>'
            f'<div class="card"><div class="v">{_fmt(lookup(s, "llm_calls_per_turn.p50"))}</div>'
            f'<div class="l">LLM calls per turn, p50 (p95 {_fmt(lookup(s, "llm_calls_per_turn.p95"))})</div></div>'
            f'<div class="card"><div class="v">{_fmt(lookup(s, "latency_s.p50"))} s</div>'
            f'<div class="l">latency per turn, p50 (p95 {_fmt(lookup(s, "latency_s.p95"))} s)</div></div></div>')


def _targets(kind: str, s: dict[str, Any], profile: str) -> str:
    rows = []
    for label, key, passes, want in TARGETS[kind]:
        v = lookup(s, key)
        mark = '<span class="ok">✓</span>' if passes(v) else '<span class="ko">✗</span>'
        rows.append(f"<tr><td>{_e(label)}</td><td class='num'>{_fmt(v)}</td><td>{_e(want)}</td><td>{mark}</td></tr>")
    where = lookup(s, "answer_leaks.where") or []
    leak_note = ("<p class='meta'>answers with leaks: "
                 + _e("; ".join(f"{w['id']} ({', '.join(w['leaks'])})" for w in where[:40])) + "</p>") if where else ""
    note = "" if profile.startswith("local") else f" (this run used profile {_e(profile)}; the targets are for the local model)"
    return (f"<h2>Targets (docs/architecture.md){note}</h2><table><tr><th>figure</th><th>value</th><th>target</th><th></th></tr>"
            + "".join(rows) + "</table>" + leak_note)


def _figures_table(s: dict[str, Any]) -> str:
    rows = [(k, s["check_counts"][k]["passed"], s["check_counts"][k]["total"], v)
            for k, v in s.get("check_rates", {}).items()]
    out = ("<h2>Checks</h2><table><tr><th>check</th><th>passed</th><th>of</th><th>rate</th></tr>"
           + "".join(f"<tr><td>{_e(k)}</td><td class='num'>{p}</td><td class='num'>{t}</td>"
                     f"<td class='num'>{_fmt(v)}</td></tr>" for k, p, t, v in rows) + "</table>")
    if "backends" in s:
        out += ("<h2>Per backend</h2><table><tr><th>figure</th><th>value</th></tr>"
                + "".join(f"<tr><td>{_e(k)}</td><td class='num'>{_fmt(v)}</td></tr>" for k, v in s["backends"].items())
                + f"<tr><td>plan matches needs</td><td class='num'>{_fmt(s.get('plan_matches_needs'))}</td></tr></table>")
    stats = [("LLM calls per turn", "llm_calls_per_turn"), ("tokens per turn", "tokens_per_turn"),
             ("latency per turn (s)", "latency_s")]
    out += ("<h2>Per turn</h2><table><tr><th></th><th>p50</th><th>p95</th><th>mean</th><th>max</th></tr>"
            + "".join(f"<tr><td>{_e(label)}</td>" + "".join(f"<td class='num'>{_fmt(lookup(s, f'{key}.{q}'))}</td>"
                                                          for q in ("p50", "p95", "mean", "max")) + "</tr>"
                      for label, key in stats)
            + f"<tr><td colspan=5>{s.get('turns', 0)} turns</td></tr></table>")
    return out


def _failed(kind: str, r: dict[str, Any]) -> list[str]:
    if kind == "conversations":
        out = [f"turn{i + 1}.{k}" for i, t in enumerate(r["turns"]) for k, v in t["checks"].items() if not v]
        return out + [k for k, v in r["final_checks"].items() if not v]
    return [k for k, v in r["checks"].items() if not v]


def _item_details(kind: str, r: dict[str, Any]) -> str:
    if kind == "conversations":
        rows = "".join(
            f"<tr><td>{i + 1}</td><td>{_e(t['user'])}</td><td><pre>{_e(t['answer'])}</pre></td>"
            f"<td>{_e(t['expect'].get('status_after'))} → {_e(t['status'])}</td>"
            f"<td><pre>{_e(json.dumps(t['expect'], ensure_ascii=False))}</pre></td>"
            f"<td>{' '.join(('' if v else '✗') + _e(k) for k, v in t['checks'].items())}</td>"
            f"<td>{_e(t['trace'].get('executed_tool') or '')}{' ⚠ unconfirmed' if t.get('unconfirmed_write') else ''}"
            f"{(' ⚠ invented: ' + _e('; '.join(t['invented']))) if t.get('invented') else ''}</td></tr>"
            for i, t in enumerate(r["turns"]))
        return ("<table><tr><th>#</th><th>user</th><th>answer</th><th>status</th><th>expect</th><th>checks</th>"
                f"<th>executed</th></tr>{rows}</table>")
    parts = [f"<b>question</b>: {_e(r['question'])}", f"<b>answer</b>:<pre>{_e(r['answer'])}</pre>",
             f"<b>needs</b> {_e(r['needs'])} · <b>plan</b> {_e({k: v for k, v in r['plan'].items() if k != 'reason'})}",
             f"<b>facts</b> {_e(r['facts'])}"]
    for name in ("sql", "cypher"):
        if r.get(name):
            d = r[name]
            parts.append(f"<b>{name}</b> gold ({d.get('gold_rows')} rows):<pre>{_e(d.get('gold'))}</pre>"
                         f"ours ({d.get('our_rows', '–')} rows):<pre>{_e(d.get('ours'))}</pre>{_e(d.get('error') or '')}")
    if r.get("doc_recall") is not None:
        parts.append(f"<b>docs</b> {_e(r['docs'])} (recall {r['doc_recall']:.2f})")
    if r.get("tables_changed"):
        parts.append(f"<b class='ko'>tables changed</b>: {_e(r['tables_changed'])}")
    if r.get("leaks"):
        parts.append(f"<b class='ko'>answer leaks</b>: {_e(', '.join(r['leaks']))}")
    return "<br>".join(parts)


def _items_table(kind: str, records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        failed = _failed(kind, r)
        turns = r["turns"] if kind == "conversations" else [r]
        calls = sum(int(t["trace"].get("llm_calls", 0)) for t in turns if t.get("trace"))
        secs = sum(float(t["seconds"]) for t in turns)
        detail = f"<details><summary>{_e(r['id'])}</summary>{_item_details(kind, r)}</details>"
        rows.append(f"<tr><td>{detail}</td><td>{'<span class=ok>✓</span>' if r['ok'] else '<span class=ko>✗</span>'}</td>"
                    f"<td>{_e(', '.join(failed))}</td><td class='num'>{calls}</td><td class='num'>{secs:.2f}</td>"
                    f"<td>{_e(r.get('error') or '')}</td></tr>")
    return ("<h2>Items</h2><table><tr><th>id (click for details)</th><th>ok</th><th>failed checks</th>"
            "<th>LLM calls</th><th>seconds</th><th>error</th></tr>" + "".join(rows) + "</table>")


def render_html(payload: dict[str, Any]) -> str:
    """The self-contained HTML page of a report payload."""
    kind, s, records = payload["kind"], payload["summary"], payload["items"]
    plots = [plot_rates(s), plot_failures(s),
             plot_confusion(s.get("status_confusion", {})) if kind == "conversations" else None,
             plot_histograms(turn_series(kind, records))]
    alts = ["success rates", "failures by check", "status_after confusion", "per-turn histograms"]
    images = "".join(_img(p, a) for p, a in zip(plots, alts, strict=True) if p)
    head = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>tramita eval {_e(kind)}</title>"
            f"<style>{_CSS}</style></head><body>")
    meta = (f"<p class='meta'>file {_e(payload['file'])} · profile <b>{_e(payload['profile'])}</b> · "
            f"{s.get('items', 0)} items · generated {_e(payload['generated_at'])}"
            f"{' · <b class=ko>INCOMPLETE RUN</b>' if payload.get('incomplete') else ''}</p>")
    return (head + f"<h1>tramita eval: {_e(kind)}</h1>{meta}{_cards(kind, s)}"
            + _targets(kind, s, payload["profile"]) + "<h2>Plots</h2>" + images + _figures_table(s)
            + _peers_section(payload.get("peers")) + _items_table(kind, records) + "</body></html>")


def _peers_section(peers: dict[str, Any] | None) -> str:
    """`--peers`: tramita and each peer on the same items, with the ratios tramita / peer."""
    if not peers:
        return ""
    if peers.get("error"):
        return f"<h2>Peers</h2><p class='ko'>the peers did not run: {_e(peers['error'])}</p>"
    rows = []
    for kind, res in peers.get("kinds", {}).items():
        r = res["ratios_tramita_over_peer"]
        for name, s in (("tramita", res["tramita"]), (res["peer"], res["peer_summary"])):
            writes = s.get("unconfirmed_writes", s.get("items_that_wrote"))
            execs = f"{s['exec_correct']}/{s['items']}" if "exec_correct" in s else "–"
            rows.append(f"<tr><td>{_e(kind)}</td><td>{_e(name)}</td><td>{s['success']}/{s['items']}</td>"
                        f"<td>{execs}</td><td>{_e(writes)}</td><td>{_fmt(s['llm_calls_per_turn'])}</td>"
                        f"<td>{_fmt(s['latency_s_p50'])}</td></tr>")
        rows.append(f"<tr><td>{_e(kind)}</td><td><i>ratio tramita / peer</i></td><td>{_fmt(r['success_rate'])}</td>"
                    f"<td></td><td></td><td>{_fmt(r['llm_calls_per_turn'])}</td><td>{_fmt(r['latency_p50'])}</td></tr>")
    head = ("<tr><th>kind</th><th>system</th><th>success</th><th>execution accuracy</th>"
            "<th>unconfirmed writes / items that wrote</th><th>LLM calls per turn</th><th>latency p50 s</th></tr>")
    notes = "; ".join(_e(d) for d in peers.get("deviations", []))
    return (f"<h2>Peers (same model, same items)</h2><table>{head}{''.join(rows)}</table>"
            f"<p class='meta'>{notes}</p>")


def write_reports(out: Path, *, kind: str, file: str, profile: str, summary: dict[str, Any],
                  records: list[dict[str, Any]], incomplete: bool = False,
                  peers: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """`<out>/report.json` and `<out>/report.html`; returns their paths. `peers`: the
    comparison of `--peers` (tramita.lab.evaluation.peers.compare_eval), without its raw records.
    """
    summary = {**summary, "answer_leaks": answer_leaks(kind, records)}
    payload = {"kind": kind, "file": file, "profile": profile, "today": "2026-05-15",
               "generated_at": datetime.now().isoformat(timespec="seconds"), "incomplete": incomplete,
               "summary": summary, "items": records}
    if peers is not None:
        payload["peers"] = {**peers, "kinds": {k: {n: v for n, v in res.items() if n != "records"}
                                               for k, res in peers.get("kinds", {}).items()}}
    json_path, html_path = out / "report.json", out / "report.html"
    write_json(json_path, payload)
    tmp = html_path.with_suffix(".html.tmp")
    tmp.write_text(render_html(payload), encoding="utf-8")
    tmp.replace(html_path)
    return json_path, html_path
