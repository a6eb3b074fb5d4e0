"""Text normalisation and cheap, model-free signals about a message.

These decide things the small model is bad at (FACTS.md: it mistakes a question for a parameter
value) without spending an LLM call: language, question form, normalised comparison.
"""

from __future__ import annotations

import re
import unicodedata

MAX_MESSAGE_CHARS = 4000  # longer messages are truncated before any model sees them

_PT_HINTS = {
    "que", "qual", "quais", "quem", "quando", "quanto", "quantos", "quantas", "como", "onde", "nao", "sim",
    "uma", "um", "para", "pra", "pro", "despesa", "despesas", "ticket", "chamado", "do", "da", "dos", "das",
    "no", "na", "de", "meu", "minha", "voce", "esta", "estao", "tem", "ser", "foi", "e", "o", "a", "os", "as",
    "aprova", "aprovar", "quero", "preciso", "pode", "obrigado", "orcamento", "time", "semana", "plantao",
    "cancela", "deixa", "la", "entao", "isso", "politica", "confirmo", "escala", "reatribui", "abre",
}
_EN_HINTS = {
    "the", "what", "which", "who", "when", "how", "many", "much", "is", "are", "was", "were", "do", "does",
    "did", "yes", "no", "please", "approve", "reject", "expense", "ticket", "open", "for", "of", "in", "on",
    "to", "my", "i", "it", "cancel", "then", "with", "team", "week", "budget", "policy", "and", "can",
    "should", "status", "assigned", "services", "depend", "directly", "indirectly", "set", "make", "go", "ahead",
}
# "porque" (one word) is "because": a reason given as an answer, not a question ("por que" / "porque?")
_QUESTION_WORDS = (
    "qual", "quais", "quem", "quando", "quanto", "quantos", "quantas", "como", "onde", "por que",
    "what", "which", "who", "when", "how", "where", "why", "whose", "is there", "are there", "do we", "does",
    "can i", "can we", "according",
)
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # invalid UTF-8 decoded with surrogateescape, or JSON "\ud800"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


def clean(text: str) -> str:
    """NFKC, control and bidi characters removed, length capped: what every node works on."""
    text = unicodedata.normalize("NFKC", _SURROGATE.sub("\ufffd", text))  # not "?": that reads as a question
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = _CONTROL.sub(" ", text)
    return text[:MAX_MESSAGE_CHARS].strip()


def fold(text: str) -> str:
    """Lower-case, accents stripped, punctuation to spaces, single spaces: for lexicon matching."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"[^\w\s-]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def words(text: str) -> list[str]:
    return fold(text).split()


def detect_language(text: str, default: str = "pt") -> str:
    """'pt' or 'en' by function-word votes; accents are a strong Portuguese signal."""
    if re.search(r"[ãõçáéíóúâêô]", text.lower()):
        return "pt"
    ws = words(text)
    pt = sum(w in _PT_HINTS for w in ws)
    en = sum(w in _EN_HINTS for w in ws)
    if pt == en:
        return default
    return "pt" if pt > en else "en"


def is_question(text: str) -> bool:
    """Question form: a '?' or a leading interrogative (after fillers like 'antes,' / 'e')."""
    if "?" in text:
        return True
    f = fold(text)
    f = re.sub(r"^(antes|e|mas|ah|so|and|but|also|then|entao|ok)\s+", "", f)
    return f.startswith(_QUESTION_WORDS)
