"""OpenTelemetry tracing of AG2 handoffs: classic group chats and ag2 1.x workflow channels.

Usage::

    from otel_handoff.ag2 import AG2HandoffInstrumentor

    AG2HandoffInstrumentor().instrument()

Instruments whichever AG2 is installed, or both:

- the classic ``autogen`` package (ag2 0.9.10 to 0.14, autogen 0.14): every handoff of a group
  chat (an after-work, a context condition, an LLM condition's ``transfer_*`` tool, a tool
  returning a ``ReplyResult`` or a bare target, the group's after-work, a guardrail);
- ag2 1.x ``ag2.network`` workflow channels: every routing decision that gives the turn to
  another agent or ends the channel (a rule, a ``ToolCalled`` rule, a tool's ``Handoff`` or
  ``Finish``, the graph's default, the turn limit).

Each becomes one ``agent_handoff`` span, from the decision to the moment the next speaker starts
its turn. Spans carry names, types and ids only, never message content, tool arguments, results
or model-written reasons.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Any

from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint, resolve
from . import _features, _wrappers, package
from ._chat import GroupChatTelemetry

_GROUPCHAT_MODULE = "autogen.agentchat.groupchat"
_GROUP_UTILS_MODULE = "autogen.agentchat.group.group_utils"
_TOOL_EXECUTOR_MODULE = "autogen.agentchat.group.group_tool_executor"

# reply functions AG2 registers on agents, which keep AG2's own function if registered earlier
_AGENT_REPLY_FUNCS = ((_GROUP_UTILS_MODULE, "_run_oncontextconditions"),)
# reply functions a GroupChatManager registers at construction
_MANAGER_REPLY_FUNCS = (
    (_GROUPCHAT_MODULE, "GroupChatManager.run_chat"),
    (_GROUPCHAT_MODULE, "GroupChatManager.a_run_chat"),
)

__all__ = ["AG2HandoffInstrumentor"]


def _wrap_points(telemetry: GroupChatTelemetry) -> list[WrapPoint]:
    """(module, "Class.method" or "function", wrapper) for everything this instrumentor patches."""
    with_telemetry = functools.partial
    w = _wrappers
    return [
        (_GROUPCHAT_MODULE, "GroupChatManager.run_chat", with_telemetry(w.wrap_run_chat, telemetry)),
        (_GROUPCHAT_MODULE, "GroupChatManager.a_run_chat", with_telemetry(w.wrap_a_run_chat, telemetry)),
        (
            _GROUPCHAT_MODULE,
            "GroupChat._run_input_guardrails",
            with_telemetry(w.wrap_input_guardrails, telemetry),
        ),
        (
            _GROUPCHAT_MODULE,
            "GroupChat._run_output_guardrails",
            with_telemetry(w.wrap_output_guardrails, telemetry),
        ),
        (_GROUP_UTILS_MODULE, "determine_next_agent", with_telemetry(w.wrap_determine_next_agent, telemetry)),
        (
            _GROUP_UTILS_MODULE,
            "_evaluate_after_works_conditions",
            with_telemetry(w.wrap_evaluate_after_works, telemetry),
        ),
        (
            _GROUP_UTILS_MODULE,
            "_run_oncontextconditions",
            with_telemetry(w.wrap_run_oncontextconditions, telemetry),
        ),
        # inherited from ConversableAgent: wrapped on the executor class only, so only tool calls
        # of group chats are seen (and existing executors too: the method is looked up per call)
        (
            _TOOL_EXECUTOR_MODULE,
            "GroupToolExecutor.generate_tool_calls_reply",
            with_telemetry(w.wrap_tool_calls_reply, telemetry),
        ),
        (
            _TOOL_EXECUTOR_MODULE,
            "GroupToolExecutor.a_generate_tool_calls_reply",
            with_telemetry(w.wrap_a_tool_calls_reply, telemetry),
        ),
    ]


_WORKFLOW_MODULE = "ag2.network.adapters.workflow"
_AGENT_MODULE = "ag2.agent"
_HUB_MODULE = "ag2.network.hub.core"


def _network_wrap_points(telemetry: Any) -> list[WrapPoint]:
    """What the ag2 1.x workflow-channel tracing patches (see ``_network``)."""
    from . import _network as n

    with_telemetry = functools.partial
    return [
        (_WORKFLOW_MODULE, "WorkflowAdapter.fold", with_telemetry(n.wrap_fold, telemetry)),
        (_AGENT_MODULE, "Agent.ask", with_telemetry(n.wrap_ask, telemetry)),
        (_HUB_MODULE, "Hub.__init__", with_telemetry(n.wrap_hub_init, telemetry)),
        (_HUB_MODULE, "Hub.close", with_telemetry(n.wrap_hub_close, telemetry)),
        *(
            (_HUB_MODULE, f"Hub.{hook}", with_telemetry(n.wrap_hub_hook, telemetry, hook))
            for hook in n.HUB_HOOKS
        ),
    ]


def _reply_funcs(points: tuple[tuple[str, str], ...]) -> tuple[tuple[Any, Any], ...]:
    """(AG2's reply function, our wrapper of it) at each wrapped point."""
    wrappers = [vars(owner)[attr] for owner, attr in (resolve(*point) for point in points)]
    return tuple((wrapper.__wrapped__, wrapper) for wrapper in wrappers)


class _GroupChats(HandoffInstrumentor):
    """The classic ``autogen`` package's group chats (ag2 0.9.10 to 0.14, autogen 0.14)."""

    release = "autogen (classic AG2)"
    untraced = "its group chats are"
    tested, newest_tested = package.TESTED_CLASSIC, package.NEWEST_TESTED_CLASSIC

    def detect(self) -> _features.AG2Features | None:
        return _features.detect()

    def make_telemetry(self, parts: TelemetryParts, features: _features.AG2Features) -> GroupChatTelemetry:
        return GroupChatTelemetry(*parts, features=features)

    def wrap_points(self, telemetry: GroupChatTelemetry) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def after_instrument(self, telemetry: GroupChatTelemetry) -> None:
        telemetry.agent_reply_funcs = _reply_funcs(_AGENT_REPLY_FUNCS)
        telemetry.manager_reply_funcs = _reply_funcs(_MANAGER_REPLY_FUNCS)

    def before_uninstrument(self, telemetry: GroupChatTelemetry) -> None:
        # put AG2's own reply functions back where agents and managers registered ours
        for agent in list(telemetry.patched_agents):
            for original, wrapper in telemetry.agent_reply_funcs:
                agent.replace_reply_func(wrapper, original)
        for manager in list(telemetry.patched_managers):
            for original, wrapper in telemetry.manager_reply_funcs:
                manager.replace_reply_func(wrapper, original)


class _WorkflowChannels(HandoffInstrumentor):
    """ag2 1.x ``ag2.network`` workflow channels."""

    release = "ag2"
    untraced = "its workflow channels are"
    tested, newest_tested = package.TESTED_NETWORK, package.NEWEST_TESTED_NETWORK

    def detect(self) -> Installed | None:
        version = _features.network_version()
        return None if version is None else Installed(version)

    def missing(self) -> list[str]:
        from . import _network  # a release that moved what it imports is refused, naming the module

        return [] if _network.hub_awaits_own_hooks() else ["Hub._fan_out awaiting the hub's own hooks"]

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from ._network import NetworkTelemetry

        return NetworkTelemetry(*parts)

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _network_wrap_points(telemetry)

    def before_uninstrument(self, telemetry: Any) -> None:
        telemetry.detach_all()  # no hub is observed any more


class AG2HandoffInstrumentor(HandoffInstrumentor):
    """Traces AG2 handoffs: classic group chats (ag2 0.9.10-0.14, autogen 0.14), ag2 1.x channels."""

    parts = (_GroupChats, _WorkflowChannels)

    def instrumentation_dependencies(self) -> Collection[str]:
        # psycopg2-style: whichever distribution installs AG2 (see `package._instruments_any`)
        return _features.dependencies()
