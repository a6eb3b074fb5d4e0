"""Personal data never reaches a log line: emails, CPF numbers and phone numbers are masked.

Users type these into messages ("meu CPF é 123.456.789-09, liga no (11) 98765-4321"), and tramita
logs every refusal with an excerpt of the message, so masking happens in a `logging.Filter` that
rewrites the record before any handler formats it. It is attached to tramita's logger (and to the
server's handler, which also sees third-party loggers); a record is masked once, whatever the
number of handlers.
"""

from __future__ import annotations

import logging
import re

LOGGER_NAME = "tramita"

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.UNICODE)
# CPF: 123.456.789-09, or 11 bare digits (also catches a mobile number written without separators)
_CPF = re.compile(r"(?<![\w.])\d{3}\.?\d{3}\.?\d{3}-?\d{2}(?![\w])")
_PHONE = re.compile(
    r"(?:\+\d{1,3}[\s.-]?)?\(\d{2,3}\)\s?9?\d{4}[\s.-]?\d{4}(?!\d)"  # (11) 98765-4321
    r"|\+\d{1,3}[\s.-]?\d{1,4}[\s.-]?\d{3,5}[\s.-]?\d{3,4}(?!\d)"  # +55 11 98765 4321, +351 912 345 678
    r"|(?<![\w-])\d{2}\s9?\d{4}-\d{4}(?!\d)"  # 11 98765-4321
    r"|(?<![\w-])9?\d{4}-\d{4}(?!\d)"  # 98765-4321
)


def mask(text: str) -> str:
    """`text` with emails, CPFs and phone numbers replaced by [email], [cpf] and [phone]."""
    text = _EMAIL.sub("[email]", text)
    text = _CPF.sub("[cpf]", text)
    return _PHONE.sub("[phone]", text)


class MaskingFilter(logging.Filter):
    """Rewrites a record's message (arguments merged in) and exception text with `mask`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record in place, once per record (it is marked), and keep it: this filter never drops a record."""
        if getattr(record, "_tramita_masked", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not hide the record
            message = str(record.msg)
        record.msg = mask(message)
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask(record.exc_text)
        if record.stack_info:
            record.stack_info = mask(record.stack_info)
        record._tramita_masked = True
        return True


def _has_mask(filterer: logging.Filterer) -> bool:
    return any(isinstance(f, MaskingFilter) for f in filterer.filters)


def get_logger(name: str = LOGGER_NAME) -> logging.Logger:
    """The named logger with the masking filter attached (idempotent).

    A logger's filters only see records logged on that logger, not on its children, so every
    tramita module logs through a logger obtained here.
    """
    logger = logging.getLogger(name)
    if not _has_mask(logger):
        logger.addFilter(MaskingFilter())
    return logger


def mask_handler(handler: logging.Handler) -> logging.Handler:
    """Attach the filter to a handler, so third-party records it prints are masked too."""
    if not _has_mask(handler):
        handler.addFilter(MaskingFilter())
    return handler
