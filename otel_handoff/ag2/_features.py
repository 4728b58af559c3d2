"""Feature detection for AG2, done once at ``instrument()`` time.

Which AG2 frameworks are installed (the classic ``autogen`` package, ``ag2.network`` of
ag2 >= 1, or both), their versions, and the few differences between releases that the
wrappers care about are read here from the installed code, so wrappers only test plain values.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from .package import (
    _instruments_any,
)

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AG2Features:
    """The classic ``autogen`` group chats."""

    version: str
    # what `_evaluate_after_works_conditions` returns when no after-work matched: a sentinel
    # from 0.10 on (None then means "terminate"); None on 0.9, where a matching
    # TerminateTarget after-work is (by AG2's design then) indistinguishable from no match
    no_after_work_match: Any
    # classes a tool may return to hand off, and the executor that parks activated targets
    reply_result_cls: type
    transition_target_cls: type
    tool_executor_cls: type
    # OnContextCondition conditions / availability checks that only read context variables:
    # safe to evaluate again to tell which of several after-works matched
    pure_conditions: tuple[type, ...]


def _installed(requirement: str) -> str | None:
    try:
        return version(Requirement(requirement).name)
    except PackageNotFoundError:
        return None


def dependencies() -> tuple[str, ...]:
    """The requirement of whichever installed distribution provides AG2 (psycopg2-style)."""
    found = {requirement: _installed(requirement) for requirement in _instruments_any}
    for requirement, installed in found.items():
        if installed is not None and Requirement(requirement).specifier.contains(installed):
            return (requirement,)
    for requirement, installed in found.items():
        if installed is not None:
            return (requirement,)  # out of range: BaseInstrumentor reports the conflict
    return _instruments_any


def detect() -> AG2Features | None:
    """Read what the classic ``autogen`` package offers; None when it is not installed."""
    if importlib.util.find_spec("autogen") is None:
        return None
    from autogen.agentchat.group import context_condition, group_utils
    from autogen.agentchat.group.available_condition import (
        ExpressionAvailableCondition,
        StringAvailableCondition,
    )
    from autogen.agentchat.group.group_tool_executor import GroupToolExecutor
    from autogen.agentchat.group.reply_result import ReplyResult
    from autogen.agentchat.group.targets.transition_target import TransitionTarget
    from autogen.version import __version__

    features = AG2Features(
        version=__version__,
        no_after_work_match=getattr(group_utils, "_NO_AFTER_WORK_MATCHED", None),
        reply_result_cls=ReplyResult,
        transition_target_cls=TransitionTarget,
        tool_executor_cls=GroupToolExecutor,
        pure_conditions=(
            context_condition.StringContextCondition,
            context_condition.ExpressionContextCondition,
            StringAvailableCondition,
            ExpressionAvailableCondition,
        ),
    )
    if features.no_after_work_match is None:
        _LOG.debug(
            "ag2 %s: an after-work to TerminateTarget counts as no match (AG2 < 0.10 behaviour)",
            features.version,
        )
    return features


def network_version() -> str | None:
    """The ag2 version when ``ag2.network`` (ag2 >= 1) is installed, else None."""
    try:
        if importlib.util.find_spec("ag2.network") is None:
            return None
    except ImportError:  # an `ag2` without submodules, e.g. a namespace of 0.x
        return None
    installed = _installed("ag2")
    if installed is None or Version(installed) < Version("1.0"):
        return None  # ag2 0.13-0.14 ship the same code as the autogen.beta preview: not covered
    return installed
