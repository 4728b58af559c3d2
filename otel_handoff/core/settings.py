"""The settings core reads itself, and the one reporter of a bad setting.

The instrumentors read ``OTEL_HANDOFF_PHASE_METRICS`` whether or not ``configure()`` runs, so
the reading lives here, not in ``export/``. ``export/`` checks the ``OTEL_*`` variables with the
same reporter: a bad value is said once per set-up, in one line naming the variable and what it
accepts, and the app keeps running. The facts are kept as :class:`Problem` values, which
``otel-handoff doctor`` reads.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from .redaction import redact

_LOG = logging.getLogger("otel_handoff")

PHASE_METRICS = "OTEL_HANDOFF_PHASE_METRICS"


class Problem(NamedTuple):
    """A setting that cannot be used: the variable, what is wrong, what it accepts, what follows."""

    variable: str
    problem: str
    accepted: str
    consequence: str


class _Problems:
    """Report each invalid variable once per set-up: one line, naming it and what it accepts.

    The same facts are kept as :class:`Problem` values, which ``otel-handoff doctor`` reads.
    """

    def __init__(self) -> None:
        self.found: list[Problem] = []
        self.log = True

    def reset(self, *, log: bool = True) -> None:
        self.found = []
        self.log = log

    def __call__(
        self, variable: str, problem: str, accepted: str, consequence: str, *, kept: bool = False
    ) -> None:
        """``kept``: the setting is used all the same (a warning, not an error)."""
        if any(found.variable == variable for found in self.found):
            return
        problem, accepted = redact(problem), redact(accepted)  # a bad endpoint is quoted back
        self.found.append(Problem(variable, problem, accepted, consequence))
        if not self.log:
            return
        _LOG.log(
            logging.WARNING if kept else logging.ERROR,
            "otel-handoff: %s %s: %s. %s; the application keeps running.",
            variable,
            problem,
            accepted,
            consequence,
        )


report_problem = _Problems()


def first_set(*variables: str) -> tuple[str, str] | None:
    """The first of ``variables`` that is set and not blank, as (name, stripped value)."""
    for variable in variables:
        value = os.environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


def true_or_false(variable: str, default: bool, consequence: str, *, kept: bool = False) -> bool:
    """A true/false variable, ``default`` when unset; anything else reported once, read as ``default``."""
    setting = first_set(variable)
    if setting is None:
        return default
    if setting[1].lower() in ("true", "false"):
        return setting[1].lower() == "true"
    report_problem(setting[0], f"is {setting[1]!r}", "use true or false", consequence, kept=kept)
    return default


def phase_metrics() -> bool:
    """``OTEL_HANDOFF_PHASE_METRICS``: per-phase metric points, on unless ``false``."""
    return true_or_false(PHASE_METRICS, True, "Read as true: per-phase metric points are recorded", kept=True)
