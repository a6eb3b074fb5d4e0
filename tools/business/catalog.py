"""The business tools' texts and rules, loaded from policies YAML and checked with pydantic.

Every user-facing sentence (refusals, summaries, results) and every business number (POL-001 limits,
the receipt deadline, synonyms) lives in `policies/`, so that a wording or a limit changes without a
code change. A malformed file fails at load with the file and the field named.
"""

from __future__ import annotations

import string
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tools.business.base import ToolError
from tramita.base.paths import POLICIES_DIR

Localized = tuple[str, str]
"""A text in (Portuguese, English); a fact of this type is picked per language when rendering."""

ERROR_CODES = (
    "PERMISSION_DENIED", "VALIDATION_ERROR", "NOT_FOUND", "EXPENSE_NOT_PENDING", "SELF_APPROVAL",
    "APPROVAL_LIMIT_EXCEEDED", "TICKET_NOT_ACTIVE", "SAME_ASSIGNEE", "INCIDENT_RESOLVED",
    "SEVERITY_NOT_HIGHER", "TEAM_NOT_ALLOWED", "QUARTER_CLOSED", "DUPLICATE_PENDING_REQUEST",
    "CATEGORY_LIMIT_EXCEEDED", "RECEIPT_DEADLINE_PASSED", "NOT_ALLOWED_TO_VIEW",
)


class PolicyFileError(ValueError):
    """A policies YAML file is missing or invalid; the message names the file and the field."""


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def fmt_number(value: Any) -> str:
    """Money and counts for people: no thousands separator (so "5480" reads as in the data), and
    two decimals only when there are cents.
    """
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    if number == number.to_integral_value():
        return str(int(number))
    return f"{number:.2f}"


class Bilingual(BaseModel):
    """One template in both languages; both must use the same placeholders."""

    model_config = ConfigDict(extra="forbid")
    pt: str = Field(min_length=1)
    en: str = Field(min_length=1)

    @model_validator(mode="after")
    def _same_placeholders(self) -> Bilingual:
        if _fields(self.pt) != _fields(self.en):
            raise ValueError(f"pt uses {sorted(_fields(self.pt))} but en uses {sorted(_fields(self.en))}")
        return self

    def render(self, facts: dict[str, Any]) -> Localized:
        """Fill both languages; numbers are formatted, Localized facts are picked per language."""
        out = []
        for index, template in enumerate((self.pt, self.en)):
            values = {}
            for key in _fields(template):
                if key not in facts:
                    raise KeyError(f"template {template!r} needs the fact {key!r}")
                value = facts[key]
                if isinstance(value, tuple):
                    value = value[index]
                elif isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
                    value = fmt_number(value)
                values[key] = "" if value is None else value
            out.append(template.format_map(values))
        return out[0], out[1]


class ErrorCatalog(BaseModel):
    """policies/errors.yaml."""

    model_config = ConfigDict(extra="forbid")
    errors: dict[str, Bilingual]
    reasons: dict[str, Bilingual]
    entities: dict[str, Bilingual]

    @field_validator("errors")
    @classmethod
    def _all_codes(cls, value: dict[str, Bilingual]) -> dict[str, Bilingual]:
        missing = [code for code in ERROR_CODES if code not in value]
        if missing:
            raise ValueError(f"missing error codes: {', '.join(missing)}")
        return value


class BusinessRules(BaseModel):
    """policies/business_rules.yaml."""

    model_config = ConfigDict(extra="forbid")
    category_limits_usd: dict[str, Decimal]
    receipt_deadline_days: int = Field(gt=0)
    severity_order: list[str] = Field(min_length=2)
    inactive_ticket_statuses: list[str]
    enum_synonyms: dict[str, dict[str, list[str]]]
    number_multipliers: dict[str, Decimal]
    currency_marks: list[str]
    negative_words: list[str]
    relative_days: dict[str, int]
    quarter_words: dict[int, list[str]]
    months: dict[int, list[str]]
    reference_stopwords: list[str]

    @field_validator("quarter_words")
    @classmethod
    def _quarters(cls, value: dict[int, list[str]]) -> dict[int, list[str]]:
        if sorted(value) != [1, 2, 3, 4]:
            raise ValueError("needs exactly the quarters 1, 2, 3 and 4")
        return value

    @field_validator("months")
    @classmethod
    def _months(cls, value: dict[int, list[str]]) -> dict[int, list[str]]:
        if sorted(value) != list(range(1, 13)):
            raise ValueError("needs exactly the months 1..12")
        return value


class ToolTexts(BaseModel):
    """One tool's sentences: the summary shown before confirmation and the result after execution."""

    model_config = ConfigDict(extra="forbid")
    summary: Bilingual
    result: Bilingual


class MessageCatalog(BaseModel):
    """policies/tool_messages.yaml."""

    model_config = ConfigDict(extra="forbid")
    tools: dict[str, ToolTexts]
    parts: dict[str, Bilingual]


M = TypeVar("M", bound=BaseModel)


def load_policy(path: Path, model: type[M]) -> M:
    """Read one YAML file into `model`; errors name the file and the field."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyFileError(f"{path}: cannot read: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise PolicyFileError(f"{path}: {problems}") from exc


@lru_cache(maxsize=4)
def errors_catalog(path: Path = POLICIES_DIR / "errors.yaml") -> ErrorCatalog:
    """The refusal and error texts (policies/errors.yaml), read and checked once per path."""
    return load_policy(path, ErrorCatalog)


@lru_cache(maxsize=4)
def rules(path: Path = POLICIES_DIR / "business_rules.yaml") -> BusinessRules:
    """The business limits, orderings and synonyms (policies/business_rules.yaml), read and checked once per path."""
    return load_policy(path, BusinessRules)


@lru_cache(maxsize=4)
def messages(path: Path = POLICIES_DIR / "tool_messages.yaml") -> MessageCatalog:
    """The tools' summary and result texts (policies/tool_messages.yaml), read and checked once per path."""
    return load_policy(path, MessageCatalog)


def _jsonable_fact(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"pt": value[0], "en": value[1]}
    if isinstance(value, Decimal):
        return float(value)
    return value


def tool_error(code: str, param: str | None = None, /, **facts: Any) -> ToolError:
    """A ToolError whose messages come from errors.yaml, filled with `facts`."""
    pt, en = errors_catalog().errors[code].render(facts)
    return ToolError(code, pt, en, param, {k: _jsonable_fact(v) for k, v in facts.items()})


def reason(key: str, **facts: Any) -> Localized:
    """The `{reason}` of a VALIDATION_ERROR."""
    return errors_catalog().reasons[key].render(facts)


def validation_error(param: str, key: str, **facts: Any) -> ToolError:
    """VALIDATION_ERROR for `param` with the reason `key` of errors.yaml."""
    return tool_error("VALIDATION_ERROR", param, **facts, param=param, reason=reason(key, **facts), rule=key)


def not_found(table: str, ident: Any, param: str | None = None) -> ToolError:
    """NOT_FOUND naming the kind of row (errors.yaml `entities`) and the id that was looked for."""
    entity = errors_catalog().entities[table].render({})
    return tool_error("NOT_FOUND", param, entity=entity, id=str(ident), table=table)


def text(tool: str, kind: Literal["summary", "result"], **facts: Any) -> Localized:
    """A tool's summary or result sentence in both languages."""
    texts = messages().tools[tool]
    return (texts.summary if kind == "summary" else texts.result).render(facts)


def part(name: str, **facts: Any) -> Localized:
    """An optional fragment of tool_messages.yaml (`parts`)."""
    return messages().parts[name].render(facts)


NO_PART: Localized = ("", "")
