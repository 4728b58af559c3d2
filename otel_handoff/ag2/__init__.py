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

from opentelemetry import trace

from ..core import schema as sc
from ..core.instrumentor import HandoffInstrumentor, resolve, unwrap_each
from ..core.metrics import HandoffMetrics
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


def _wrap_points(telemetry: GroupChatTelemetry) -> list[tuple[str, str, Any]]:
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


def _network_wrap_points(telemetry: Any) -> list[tuple[str, str, Any]]:
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


def _current(module: str, name: str) -> Any:
    owner, attr = resolve(module, name)
    return vars(owner)[attr]


class AG2HandoffInstrumentor(HandoffInstrumentor):
    """Traces AG2 handoffs: classic group chats (ag2 0.9.10-0.14, autogen 0.14), ag2 1.x channels."""

    _telemetry: GroupChatTelemetry | None = None
    _network: Any = None  # _network.NetworkTelemetry while workflow channels are traced
    _manager_reply_funcs: tuple[tuple[Any, Any], ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        # psycopg2-style: whichever distribution installs AG2 (see `package._instruments_any`)
        return _features.dependencies()

    def _instrument(self, **kwargs: Any) -> None:
        tracer, metrics = self.telemetry_parts(__name__, kwargs)
        features = _features.detect()
        if features is not None:
            self._instrument_classic(features, tracer, metrics)
        network_version = _features.network_version()
        if network_version is not None:
            self._instrument_network(network_version, tracer, metrics)

    def _instrument_classic(
        self, features: _features.AG2Features, tracer: trace.Tracer, metrics: HandoffMetrics
    ) -> None:
        telemetry = GroupChatTelemetry(
            tracer=tracer,
            metrics=metrics,
            features=features,
            static_attributes=self.static_attributes(sc.FRAMEWORK_AG2, features.version),
        )
        originals = {point: _current(*point) for point in (*_AGENT_REPLY_FUNCS, *_MANAGER_REPLY_FUNCS)}
        if not self.wrap_all(
            _wrap_points(telemetry),
            release="autogen (classic AG2)",
            version=features.version,
            tested=package.TESTED_CLASSIC,
            newest_tested=package.NEWEST_TESTED_CLASSIC,
            what="its group chats are",
        ):
            return
        telemetry.agent_reply_funcs = tuple((originals[p], _current(*p)) for p in _AGENT_REPLY_FUNCS)
        cls = type(self)
        cls._manager_reply_funcs = tuple((originals[p], _current(*p)) for p in _MANAGER_REPLY_FUNCS)
        cls._telemetry = telemetry

    def _instrument_network(self, version: str, tracer: trace.Tracer, metrics: HandoffMetrics) -> None:
        what = "its workflow channels are"
        try:
            from . import _network
        except ImportError as exc:  # a release that moved what we read
            self.refuse(
                release="ag2",
                version=version,
                missing=[str(exc.name or exc)],
                what=what,
                tested=package.TESTED_NETWORK,
            )
            return
        if not _network.hub_awaits_own_hooks():
            self.refuse(
                release="ag2",
                version=version,
                missing=["Hub._fan_out awaiting the hub's own hooks"],
                what=what,
                tested=package.TESTED_NETWORK,
            )
            return
        telemetry = _network.NetworkTelemetry(
            tracer, metrics, self.static_attributes(sc.FRAMEWORK_AG2, version)
        )
        if self.wrap_all(
            _network_wrap_points(telemetry),
            release="ag2",
            version=version,
            tested=package.TESTED_NETWORK,
            newest_tested=package.NEWEST_TESTED_NETWORK,
            what=what,
        ):
            type(self)._network = telemetry

    def _uninstrument(self, **kwargs: Any) -> None:
        cls = type(self)
        telemetry = cls._telemetry
        if telemetry is not None:
            telemetry.enabled = False  # wrappers still referenced somewhere now pass straight through
            # put AG2's own reply functions back where agents and managers registered ours
            for agent in list(telemetry.patched_agents):
                for original, wrapper in telemetry.agent_reply_funcs:
                    agent.replace_reply_func(wrapper, original)
            for manager in list(telemetry.patched_managers):
                for original, wrapper in cls._manager_reply_funcs:
                    manager.replace_reply_func(wrapper, original)
        if cls._network is not None:
            cls._network.detach_all()  # no hub is observed any more
            unwrap_each(cls._network.lazily_wrapped)
        self.unwrap_all()
        cls._telemetry = None
        cls._network = None
        cls._manager_reply_funcs = ()
