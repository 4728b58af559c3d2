"""Offline AG2 group chats: a scripted model client and a support chat with every handoff kind.

The demo and the tests run AG2's own group-chat machinery end to end (``initiate_group_chat``,
the tool executor, context conditions, after-works, guardrails); only the model is replaced by a
script, so there is no network and no ``openai`` package. Works on ag2 0.9.10 … 0.14 and
autogen 0.14 (the classic ``autogen`` import package).

The support chat (``build_support_chat``), in order::

    _User   -> triage    initial agent (not a handoff)
    triage  -> billing   llm_condition      the model calls the OnCondition tool transfer_to_billing_1
    billing -> triage    reply_result       tool issue_refund() returns ReplyResult(target=triage)
    triage  -> closer    context_condition  ExpressionContextCondition fires before the model runs
    closer  -> triage    after_work         closer.handoffs.set_after_work(AgentTarget(triage))
    triage  -> auditor   tool               plain tool escalate_to_auditor() returns AgentTarget(auditor)
    auditor -> billing   guardrail          auditor's output guardrail (RegexGuardrail) matches "Bye"
    billing -> (end)     group_after_work   the pattern's group_after_work=TerminateTarget()

Import this module only when AG2 (``autogen``) is installed.
"""

# No `from __future__ import annotations` here: AG2 builds tool JSON schemas from real annotations.

import json
import logging
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from autogen import ConversableAgent
from autogen.agentchat.group import (
    AgentTarget,
    ContextExpression,
    ContextStr,
    ContextStrLLMCondition,
    ContextVariables,
    ExpressionContextCondition,
    OnCondition,
    OnContextCondition,
    ReplyResult,
    StringLLMCondition,
    TerminateTarget,
)
from autogen.agentchat.group.guardrails import RegexGuardrail
from autogen.agentchat.group.patterns import DefaultPattern

__all__ = [
    "SUPPORT_CHAT_HANDOFFS",
    "SUPPORT_CHAT_MESSAGE",
    "ScriptedAgent",
    "ScriptedModelClient",
    "build_support_chat",
    "reset_support_chat",
    "script",
]

logging.getLogger("autogen.oai.client").setLevel(logging.WARNING)  # "custom model client" INFO lines

# model name -> the steps still to play; a step is ("tool", tool-name prefix, {args}) or ("text", content)
_SCRIPTS: dict[str, Iterator[tuple[Any, ...]]] = {}
_CALLS: dict[str, int] = {}  # model name -> model calls so far (deterministic tool call ids)
_SCRIPTS_LOCK = threading.Lock()

SUPPORT_CHAT_MESSAGE = "I want a refund for order 4711."

# (kind, from, to, condition type, tool name prefix, target type) of the support chat, in order
SUPPORT_CHAT_HANDOFFS: list[tuple[str, str, str | None, str | None, str | None, str]] = [
    ("llm_condition", "triage", "billing", "StringLLMCondition", "transfer_to_billing", "AgentTarget"),
    ("reply_result", "billing", "triage", None, "issue_refund", "AgentTarget"),
    ("context_condition", "triage", "closer", "ExpressionContextCondition", None, "AgentTarget"),
    ("after_work", "closer", "triage", None, None, "AgentTarget"),
    ("tool", "triage", "auditor", None, "escalate_to_auditor", "AgentTarget"),
    ("guardrail", "auditor", "billing", "RegexGuardrail", None, "AgentTarget"),
    ("group_after_work", "billing", None, None, None, "TerminateTarget"),
]


def script(model: str, steps: list[tuple[Any, ...]]) -> None:
    """Set what the scripted model named ``model`` answers, one step per call."""
    with _SCRIPTS_LOCK:
        _SCRIPTS[model] = iter(steps)
        _CALLS[model] = 0


class ScriptedModelClient:
    """AG2 ``ModelClient`` (create / message_retrieval / cost / get_usage) playing a script."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self.model = config["model"]

    def create(self, params: dict[str, Any]) -> SimpleNamespace:
        offered = [t["function"]["name"] for t in params.get("tools", [])]
        with _SCRIPTS_LOCK:
            step = next(_SCRIPTS[self.model])
            _CALLS[self.model] += 1
            call_number = _CALLS[self.model]
        if step[0] == "tool":
            name = next(n for n in offered if n.startswith(step[1]))  # the tool must really be offered
            call = {
                "id": f"call_{self.model}_{call_number}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(step[2])},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": step[1]}
        return SimpleNamespace(
            id=self.model, model=self.model, choices=[SimpleNamespace(message=message)], usage=None, cost=0.0
        )

    def message_retrieval(self, response: SimpleNamespace) -> list[Any]:
        return [choice.message for choice in response.choices]

    def cost(self, response: SimpleNamespace) -> float:
        return 0.0

    @staticmethod
    def get_usage(response: SimpleNamespace) -> dict[str, Any]:
        return {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "cost": 0.0,
            "model": response.model,
        }


class ScriptedAgent(ConversableAgent):
    """A ``ConversableAgent`` whose model is ``ScriptedModelClient`` playing the script of ``model``.

    ``update_tool_signature()`` rebuilds the agent's client (the group hook re-registers the
    OnCondition tools before every reply), so the scripted client is registered again each time.
    """

    def __init__(self, name: str, *, model: str, **kwargs: Any) -> None:
        llm_config = {
            "config_list": [{"model": model, "model_client_cls": "ScriptedModelClient"}],
            "cache_seed": None,
        }
        super().__init__(name, llm_config=llm_config, human_input_mode="NEVER", **kwargs)
        self._ensure_scripted_client()

    def _ensure_scripted_client(self) -> None:
        from autogen.oai.client import PlaceHolderClient

        if any(isinstance(client, PlaceHolderClient) for client in self.client._clients):
            self.register_model_client(ScriptedModelClient)

    def update_tool_signature(self, *args: Any, **kwargs: Any) -> None:
        super().update_tool_signature(*args, **kwargs)
        self._ensure_scripted_client()


def build_support_chat(tag: str = "support") -> DefaultPattern:
    """A triage/billing/closer/auditor support chat with one handoff of every kind.

    ``tag`` names the scripts, so chats with different tags can run at the same time.
    Run it with ``initiate_group_chat(pattern=..., messages=SUPPORT_CHAT_MESSAGE)``.
    """
    agents: dict[str, ConversableAgent] = {}

    def issue_refund(order_id: int, context_variables: ContextVariables) -> ReplyResult:
        """Refund an order."""
        return ReplyResult(
            message=f"Refunded order {order_id}.",
            target=AgentTarget(agents["triage"]),
            context_variables=ContextVariables(data={"refund_done": True, "order_id": order_id}),
        )

    def escalate_to_auditor() -> AgentTarget:
        """Have the refund audited (a plain tool returning a bare TransitionTarget)."""
        return AgentTarget(agents["auditor"])

    def closer_reply(recipient: Any, messages: Any = None, sender: Any = None, config: Any = None) -> Any:
        recipient.context_variables["closed"] = True
        return True, f"Refund for order {recipient.context_variables.get('order_id')} confirmed."

    def auditor_reply(recipient: Any, messages: Any = None, sender: Any = None, config: Any = None) -> Any:
        return True, "Audit of the refund passed. Bye."

    triage = ScriptedAgent(
        "triage", model=f"{tag}-triage", system_message="Route the customer.", functions=[escalate_to_auditor]
    )
    billing = ScriptedAgent(
        "billing", model=f"{tag}-billing", system_message="Handle refunds.", functions=[issue_refund]
    )
    closer = ConversableAgent("closer", llm_config=False, human_input_mode="NEVER")
    auditor = ConversableAgent("auditor", llm_config=False, human_input_mode="NEVER")
    closer.register_reply([ConversableAgent, None], closer_reply)
    auditor.register_reply([ConversableAgent, None], auditor_reply)
    agents.update(triage=triage, billing=billing, auditor=auditor)

    triage.handoffs.add_context_condition(
        OnContextCondition(
            target=AgentTarget(closer),
            condition=ExpressionContextCondition(
                ContextExpression("${refund_done} == True and ${closed} == False")
            ),
        )
    )
    triage.handoffs.add_llm_conditions(
        [
            OnCondition(
                target=AgentTarget(billing), condition=StringLLMCondition("Transfer to billing for refunds.")
            ),
            OnCondition(
                target=AgentTarget(closer),
                condition=ContextStrLLMCondition(
                    ContextStr(template="Transfer to closer once {order_id} is refunded.")
                ),
            ),
        ]
    )
    closer.handoffs.set_after_work(AgentTarget(triage))
    auditor.register_output_guardrail(
        RegexGuardrail(name="goodbye", condition=r"\bBye\b", target=AgentTarget(billing))
    )
    # billing and auditor have no after-work: the pattern's group_after_work decides for them
    pattern = DefaultPattern(
        initial_agent=triage,
        agents=[triage, billing, closer, auditor],
        context_variables=ContextVariables(),
        group_after_work=TerminateTarget(),
    )
    reset_support_chat(pattern, tag)
    return pattern


def reset_support_chat(pattern: DefaultPattern, tag: str = "support") -> None:
    """Rewind a support chat's scripts and context, to run the same agents again."""
    script(f"{tag}-triage", [("tool", "transfer_to_billing", {}), ("tool", "escalate_to_auditor", {})])
    script(f"{tag}-billing", [("tool", "issue_refund", {"order_id": 4711}), ("text", "All refunded.")])
    pattern.context_variables.update({"refund_done": False, "closed": False, "order_id": None})


if __name__ == "__main__":
    from autogen.agentchat import initiate_group_chat

    result, context, last = initiate_group_chat(
        pattern=build_support_chat(), messages=SUPPORT_CHAT_MESSAGE, max_rounds=30
    )
    print("speakers:", [message.get("name") for message in result.chat_history])
    print("last speaker:", last.name)
