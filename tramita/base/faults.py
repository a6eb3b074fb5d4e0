"""Named crash points for the crash-and-restart tests.

`TRAMITA_CRASH_AT=<point>` makes the process SIGKILL itself when it reaches that point, which is
how the tests prove that a transaction survives a kill at every step. Unset, this costs one dict
lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "before_extraction",
    "after_summary",
    "after_business_write",  # inside the DB transaction, before the audit row
    "after_commit",  # the write is durable, the reply is not yet sent
)


def crash_point(name: str) -> None:
    """Kill this process right here if the environment asks for it."""
    if os.environ.get("TRAMITA_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
