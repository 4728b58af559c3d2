"""The wrapt wrappers the AG2 instrumentor installs, one small function per wrap point.

Where AG2 decides a handoff (the ``agent_handoff.kind`` each one reports):

- ``GroupToolExecutor.(a_)generate_tool_calls_reply``: a tool returned a ``ReplyResult`` with a
  target (``reply_result``) or a bare ``TransitionTarget``: an OnCondition's ``transfer_*``
  function (``llm_condition``) or any other tool (``tool``);
- ``group_utils._run_oncontextconditions``: an OnContextCondition fired (``context_condition``);
- ``group_utils._evaluate_after_works_conditions``: the last agent's after-work matched
  (``after_work``), or nothing matched and ``determine_next_agent`` falls back to the group's
  after-work (``group_after_work``);
- ``GroupChat._run_input_guardrails`` / ``_run_output_guardrails``: a guardrail activated.

Where a handoff lands: ``_run_input_guardrails`` opens every speaker's turn in
``run_chat``/``a_run_chat``, right after speaker selection. ``GroupChatManager.(a_)run_chat``
scopes a chat. Each wrapper calls the original with the same arguments and returns its value;
our bookkeeping runs through ``guard``, so a fault of ours never reaches the chat.
"""

from __future__ import annotations

import time
from typing import Any

from ..core import schema as sc
from ..core.faults import guard
from ._chat import ChatState, Decision, GroupChatTelemetry


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _type_name(value: Any) -> str | None:
    return type(value).__name__ if value is not None else None


# --- chat scope ---------------------------------------------------------------------------------
def wrap_run_chat(telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    chat = guard("GroupChatManager.run_chat", _begin_chat, telemetry, instance, args, kwargs)
    if chat is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("GroupChatManager.run_chat", telemetry.end_chat, instance, chat, exc)
        raise
    guard("GroupChatManager.run_chat", telemetry.end_chat, instance, chat, None)
    return result


async def wrap_a_run_chat(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    chat = guard("GroupChatManager.a_run_chat", _begin_chat, telemetry, instance, args, kwargs)
    if chat is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("GroupChatManager.a_run_chat", telemetry.end_chat, instance, chat, exc)
        raise
    guard("GroupChatManager.a_run_chat", telemetry.end_chat, instance, chat, None)
    return result


def _begin_chat(telemetry: GroupChatTelemetry, manager: Any, args: Any, kwargs: Any) -> ChatState | None:
    chat = telemetry.begin_chat(manager)
    if chat is None:
        return None
    telemetry.patched_managers.add(manager)
    groupchat = _arg(args, kwargs, 2, "config")
    if groupchat is None:
        groupchat = getattr(manager, "groupchat", None)
    for agent in getattr(groupchat, "agents", ()):
        if getattr(agent, "_group_is_established", False):
            # agents established before instrument() still hold AG2's own reply function
            for original, wrapper in telemetry.agent_reply_funcs:
                agent.replace_reply_func(original, wrapper)
            telemetry.patched_agents.add(agent)
    return chat


# --- tools --------------------------------------------------------------------------------------
def wrap_tool_calls_reply(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = wrapped(*args, **kwargs)
    if telemetry.enabled:
        guard(
            "GroupToolExecutor.generate_tool_calls_reply",
            _note_tool_targets,
            telemetry,
            instance,
            args,
            kwargs,
            result,
        )
    return result


async def wrap_a_tool_calls_reply(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = await wrapped(*args, **kwargs)
    if telemetry.enabled:
        guard(
            "GroupToolExecutor.a_generate_tool_calls_reply",
            _note_tool_targets,
            telemetry,
            instance,
            args,
            kwargs,
            result,
        )
    return result


def _note_tool_targets(
    telemetry: GroupChatTelemetry, executor: Any, args: Any, kwargs: Any, result: Any
) -> None:
    """A tool's return value asked for a handoff: one decision per target-returning tool call.

    The executor runs one tool call per invocation; if several return targets, AG2 keeps the
    last one, and so does ``ChatState.decide`` (earlier ones end as ``skipped``).
    """
    chat = telemetry.chat_of(executor)
    if chat is None or not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[1], dict):
        return
    messages = _arg(args, kwargs, 0, "messages")
    if not messages:
        return
    message = messages[-1]
    tool_names = {
        call.get("id"): call.get("function", {}).get("name") for call in message.get("tool_calls") or ()
    }
    source = message.get("name") or ""
    features = telemetry.features
    for response in result[1].get("tool_responses") or ():
        content = response.get("content")
        call_id = response.get("tool_call_id")
        tool_name = tool_names.get(call_id)
        condition_type = None
        if isinstance(content, features.reply_result_cls):
            if content.target is None:
                continue
            kind, target = sc.KIND_REPLY_RESULT, content.target
        elif isinstance(content, features.transition_target_cls):
            target = content
            condition = _llm_condition(executor, source, tool_name)
            kind = sc.KIND_LLM_CONDITION if condition is not None else sc.KIND_TOOL
            condition_type = _type_name(getattr(condition, "condition", None))
        else:
            continue
        chat.decide(
            Decision(
                kind,
                source,
                target,
                time.time_ns(),
                condition_type=condition_type,
                tool_name=tool_name,
                tool_call_id=call_id,
            )
        )


def _llm_condition(executor: Any, source: str, tool_name: str | None) -> Any:
    """The OnCondition whose ``transfer_*`` function ``tool_name`` is, on the calling agent."""
    agent = executor._group_manager.groupchat.agent_by_name(source)
    handoffs = getattr(agent, "handoffs", None)
    if handoffs is None or not tool_name:
        return None
    return next((c for c in handoffs.llm_conditions if c.llm_function_name == tool_name), None)


# --- context conditions -------------------------------------------------------------------------
def wrap_run_oncontextconditions(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = wrapped(*args, **kwargs)
    if telemetry.enabled and isinstance(result, tuple) and result and result[0]:
        guard("_run_oncontextconditions", _note_context_condition, telemetry, args, kwargs)
    return result


def _note_context_condition(telemetry: GroupChatTelemetry, args: Any, kwargs: Any) -> None:
    agent = _arg(args, kwargs, 0, "agent")
    chat = telemetry.chat_of(agent)
    target = _activated_target(telemetry, agent)
    if chat is None or target is None:
        return
    # AG2 activated the firing condition's own target object
    condition = next((c for c in agent.handoffs.context_conditions if c.target is target), None)
    chat.decide(
        Decision(
            sc.KIND_CONTEXT_CONDITION,
            agent.name,
            target,
            time.time_ns(),
            condition_type=_type_name(getattr(condition, "condition", None)),
        )
    )


def _activated_target(telemetry: GroupChatTelemetry, agent: Any) -> Any:
    """The target just activated for the agent's chat (AG2 parks it on the group's tool executor)."""
    for member in agent._group_manager.groupchat.agents:
        if isinstance(member, telemetry.features.tool_executor_cls):
            return member.get_next_target() if member.has_next_target() else None
    return None


# --- after-works --------------------------------------------------------------------------------
def wrap_determine_next_agent(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    chat = guard("determine_next_agent", _chat_of_resolution, telemetry, args, kwargs)
    result = wrapped(*args, **kwargs)
    if chat is not None:
        guard("determine_next_agent", _note_resolution, chat, args, kwargs, result)
    return result


def _chat_of_resolution(telemetry: GroupChatTelemetry, args: Any, kwargs: Any) -> ChatState | None:
    chat = telemetry.chat_of(_arg(args, kwargs, 4, "tool_executor"))
    if chat is not None:
        chat.after_work_no_match = None
    return chat


def _note_resolution(chat: ChatState, args: Any, kwargs: Any, result: Any) -> None:
    no_match, chat.after_work_no_match = chat.after_work_no_match, None
    if no_match is not None:
        # no after-work of the last agent matched: AG2 goes on with the group's after-work
        from_agent, start_ns = no_match
        chat.decide(
            Decision(
                sc.KIND_GROUP_AFTER_WORK, from_agent, _arg(args, kwargs, 7, "group_after_work"), start_ns
            )
        )
    if result is None and chat.pending is not None:
        chat.pending.terminates = True  # the decided target resolved to "end the chat"


def wrap_evaluate_after_works(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = wrapped(*args, **kwargs)
    if telemetry.enabled:
        guard("_evaluate_after_works_conditions", _note_after_works, telemetry, args, kwargs, result)
    return result


def _note_after_works(telemetry: GroupChatTelemetry, args: Any, kwargs: Any, result: Any) -> None:
    agent = _arg(args, kwargs, 0, "agent")
    chat = telemetry.chat_of(agent)
    if chat is None:
        return
    now = time.time_ns()
    if result is telemetry.features.no_after_work_match:
        chat.after_work_no_match = (agent.name, now)
        return
    matched = _matched_after_work(telemetry, agent, _arg(args, kwargs, 1, "groupchat"))
    decision = Decision(
        sc.KIND_AFTER_WORK,
        agent.name,
        getattr(matched, "target", None),
        now,
        condition_type=_type_name(getattr(matched, "condition", None)),
    )
    decision.terminates = result is None
    chat.decide(decision)


def _matched_after_work(telemetry: GroupChatTelemetry, agent: Any, groupchat: Any) -> Any:
    """Which after-work matched: AG2 returns only the resolved speaker.

    With one after-work (``set_after_work``) it is that one. With several, AG2's built-in
    conditions, which only read context variables, are evaluated again in AG2's order; any
    other condition class could have effects, so then we do not guess.
    """
    after_works = agent.handoffs.after_works
    if len(after_works) == 1:
        return after_works[0]
    pure = telemetry.features.pure_conditions
    for candidate in after_works:
        checks = [c for c in (candidate.available, candidate.condition) if c is not None]
        if any(type(check) not in pure for check in checks):
            return None
        if candidate.available is not None and not candidate.available.is_available(
            agent, groupchat.messages
        ):
            continue
        if candidate.condition is None or candidate.condition.evaluate(agent.context_variables):
            return candidate
    return None


# --- guardrails and the start of each turn ------------------------------------------------------
def wrap_input_guardrails(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    if telemetry.enabled:
        guard("GroupChat._run_input_guardrails", _speaker_starts, telemetry, args, kwargs)
    result = wrapped(*args, **kwargs)
    if result is not None and telemetry.enabled:
        guard("GroupChat._run_input_guardrails", _note_guardrail, telemetry, args, kwargs, "input_guardrails")
    return result


def wrap_output_guardrails(
    telemetry: GroupChatTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = wrapped(*args, **kwargs)
    if result is not None and telemetry.enabled:
        guard(
            "GroupChat._run_output_guardrails", _note_guardrail, telemetry, args, kwargs, "output_guardrails"
        )
    return result


def _speaker_starts(telemetry: GroupChatTelemetry, args: Any, kwargs: Any) -> None:
    speaker = _arg(args, kwargs, 0, "agent")
    chat = telemetry.chat_of(speaker)
    if chat is not None:
        chat.speaker_starts(speaker)


def _note_guardrail(telemetry: GroupChatTelemetry, args: Any, kwargs: Any, which: str) -> None:
    agent = _arg(args, kwargs, 0, "agent")
    chat = telemetry.chat_of(agent)
    target = _activated_target(telemetry, agent)
    if chat is None or target is None:
        return
    guardrail = next((g for g in getattr(agent, which, ()) if g.target is target), None)
    chat.decide(
        Decision(sc.KIND_GUARDRAIL, agent.name, target, time.time_ns(), condition_type=_type_name(guardrail))
    )
