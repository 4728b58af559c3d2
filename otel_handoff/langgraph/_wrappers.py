"""Where LangGraph is observed, each point called per run, node step, tool call or model call,
never per token or streamed part:

- LangGraph's loop (``SyncPregelLoop``/``AsyncPregelLoop`` entered and exited), top-level runs
  only: the run's thread and the app's span, and its end (what still waits ends with it);
- ``BaseTool.run``/``arun`` inside a run: a ``Command(graph=PARENT)`` result is a handoff;
- the loop's checkpoint puts, one counter test unless a handoff is in flight: how many checkpoints
  are saved on its way;
- LangGraph's task runner (``pregel._runner``'s ``run_with_retry``/``arun_with_retry``): a target
  node's start, one counter test while no handoff waits for one;
- LangChain's ``CallbackManager``/``AsyncCallbackManager`` ``on_chat_model_start``/``on_llm_start``
  (once per model call, however the agent calls its model), one counter test: the new agent's
  first model run gets a handler of ours until its first token;
- langgraph-supervisor's ``create_handoff_back_messages``: a worker handing back.

LangGraph has no public hook per run or node step (LangChain's callbacks reach every runnable and
token); the loop and runner are private, checked at ``instrument()``, all or nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.faults import report
from ._handoffs import CURRENT, GraphTelemetry, Handoff, Invocation

_STOPPED = (GeneratorExit, asyncio.CancelledError)  # the app stopped the run: no error of the run's


def namespace_of(metadata: dict[str, Any] | None) -> str:
    """A run's checkpoint namespace (``"triage:<task>|tools:<task>"``): which node of which graph."""
    namespace = (metadata or {}).get("langgraph_checkpoint_ns")
    return namespace if isinstance(namespace, str) else ""


def _node_name(segment: str) -> str | None:
    return segment.split(":", 1)[0] or None


def _current() -> Invocation | None:
    invocation = CURRENT.get()
    return None if invocation is None or invocation.ended else invocation


# --- the top-level run ----------------------------------------------------------------------------


def wrap_loop_enter(telemetry: GraphTelemetry) -> Any:
    """``SyncPregelLoop.__enter__``: a top-level run starts (a subgraph's loop is left alone)."""

    def enter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        loop = wrapped(*args, **kwargs)
        if telemetry.enabled and _top_level(instance):
            _run_started(telemetry, instance)
        return loop

    return enter


def wrap_loop_aenter(telemetry: GraphTelemetry) -> Any:
    """``AsyncPregelLoop.__aenter__``: the same; LangGraph's coroutine unless a top-level run."""

    def aenter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.enabled or not _top_level(instance):
            return wrapped(*args, **kwargs)
        return _entered(telemetry, instance, wrapped(*args, **kwargs))

    return aenter


async def _entered(telemetry: GraphTelemetry, loop: Any, entering: Any) -> Any:
    entered = await entering
    _run_started(telemetry, loop)  # in the run's own context: its tasks, made later, inherit it
    return entered


TASK_ID = "__pregel_task_id"  # LangGraph's CONFIG_KEY_TASK_ID (checked at instrument())


def _top_level(loop: Any) -> bool:
    """A graph not run as a task of another (LangGraph's own test): its tasks, and the subgraphs
    they run, belong to this run. Not "no run current": a stream the app never finished leaves
    its run current in the app's context, and must not hide the next one."""
    try:
        return TASK_ID not in (loop.config.get("configurable") or {})
    except Exception as exc:
        report("LangGraph run start", exc)
        return False


def _run_started(telemetry: GraphTelemetry, loop: Any) -> None:
    try:
        thread = ((getattr(loop, "config", None) or {}).get("configurable") or {}).get("thread_id")
        thread = thread if isinstance(thread, str) and thread else None
        conversation = telemetry.threads.get(thread, thread, time.time_ns())
        current = otel_context.get_current()
        if not trace.get_current_span(current).get_span_context().is_valid:
            current = otel_context.Context()
        invocation = Invocation(telemetry, conversation, current, id(loop))
        invocation.token = CURRENT.set(invocation)
    except Exception as exc:
        report("LangGraph run start", exc)


def wrap_loop_exit(telemetry: GraphTelemetry) -> Any:
    """``SyncPregelLoop.__exit__``: the run ends, and what still waits ends with it."""

    def exit_(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        invocation = CURRENT.get()
        if invocation is None or invocation.loop_id != id(instance):
            return wrapped(*args, **kwargs)
        try:
            return wrapped(*args, **kwargs)
        finally:
            _run_ended(telemetry, invocation, args[1] if len(args) > 1 else None)

    return exit_


def wrap_loop_aexit(telemetry: GraphTelemetry) -> Any:
    """``AsyncPregelLoop.__aexit__``: the same; LangGraph's coroutine unless the top-level run."""

    def aexit(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        invocation = CURRENT.get()
        if invocation is None or invocation.loop_id != id(instance):
            return wrapped(*args, **kwargs)
        error = args[1] if len(args) > 1 else None
        return _exited(telemetry, invocation, wrapped(*args, **kwargs), error)

    return aexit


async def _exited(telemetry: GraphTelemetry, invocation: Invocation, exiting: Any, error: Any) -> Any:
    try:
        return await exiting
    finally:
        _run_ended(telemetry, invocation, error)


def _run_ended(telemetry: GraphTelemetry, invocation: Invocation, error: BaseException | None) -> None:
    if invocation.ended:
        return
    try:
        stopped = error is None or isinstance(error, (*_STOPPED, *telemetry.bubble_types))
        invocation.end(None if stopped else error)
    except Exception as exc:
        report("LangGraph run end", exc)
    # ended from another context (a stream closed elsewhere)? ``ended`` says it there
    with contextlib.suppress(ValueError):
        CURRENT.reset(invocation.token)


# --- node steps -----------------------------------------------------------------------------------


def wrap_task(telemetry: GraphTelemetry) -> Any:
    """LangGraph's ``run_with_retry``/``arun_with_retry``: a node step starts (sync or async: the
    coroutine is returned, not awaited here)."""

    def run_task(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if telemetry.unstarted:
            _task_starting(args[0] if args else kwargs.get("task"))
        return wrapped(*args, **kwargs)

    return run_task


def _task_starting(task: Any) -> None:
    try:
        invocation = _current()
        if invocation is None:
            return
        invocation.node_started(task.name, namespace_of(task.config.get("metadata")))
    except Exception as exc:
        report("LangGraph node start", exc)


def wrap_checkpoint_write(telemetry: GraphTelemetry) -> Any:
    """The loop's checkpoint put (any run, subgraphs too): counted while a handoff is in flight,
    one counter test otherwise. The coroutine, if any, is LangGraph's. (The pending-write batches
    between checkpoints are not counted: one more wrapper on every task.)"""

    def checkpoint_write(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if telemetry.in_flight:
            _checkpoint_written(instance)
        return wrapped(*args, **kwargs)

    return checkpoint_write


def _checkpoint_written(loop: Any) -> None:
    try:
        invocation = CURRENT.get()
        if invocation is not None and loop.checkpointer is not None:
            invocation.writes += 1
    except Exception as exc:
        report("LangGraph checkpoint write", exc)


# --- tools: where a handoff is decided --------------------------------------------------------------


def wrap_tool_run(telemetry: GraphTelemetry) -> Any:
    def run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        invocation = _current()
        if invocation is None:
            return wrapped(*args, **kwargs)
        start_ns = time.time_ns()
        try:
            output = wrapped(*args, **kwargs)
        except Exception as exc:
            _tool_failed(telemetry, invocation, instance, kwargs, start_ns, exc)
            raise
        _tool_returned(telemetry, invocation, instance, kwargs, start_ns, output)
        return output

    return run


def wrap_tool_arun(telemetry: GraphTelemetry) -> Any:
    def arun(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        invocation = _current()
        if invocation is None:
            return wrapped(*args, **kwargs)
        return _observed_arun(telemetry, invocation, instance, kwargs, wrapped(*args, **kwargs))

    return arun


async def _observed_arun(
    telemetry: GraphTelemetry, invocation: Invocation, tool: Any, kwargs: Any, running: Any
) -> Any:
    start_ns = time.time_ns()
    try:
        output = await running
    except Exception as exc:
        _tool_failed(telemetry, invocation, tool, kwargs, start_ns, exc)
        raise
    _tool_returned(telemetry, invocation, tool, kwargs, start_ns, output)
    return output


def _tool_returned(
    telemetry: GraphTelemetry, invocation: Invocation, tool: Any, kwargs: Any, start_ns: int, output: Any
) -> None:
    """A ``Command(graph=PARENT)`` with a ``goto``: one handoff per target."""
    try:
        command_type = telemetry.command_type
        if command_type is None or not isinstance(output, command_type):
            return
        if getattr(output, "graph", None) != telemetry.parent_marker:
            return
        targets = _targets(telemetry, getattr(output, "goto", None))
        if not targets:
            return
        now = time.time_ns()
        from_agent, graph_ns, name, call_id = _tool_identity(tool, kwargs)
        for target in targets:
            invocation.decided(
                from_agent=from_agent,
                to_agent=target,
                trigger=sc.TRIGGER_TOOL,
                tool_name=name,
                tool_call_id=call_id,
                start_ns=start_ns,
                graph_ns=graph_ns,
                handler_end_ns=now,
            )
    except Exception as exc:
        report("LangGraph tool end", exc)


def _tool_failed(
    telemetry: GraphTelemetry,
    invocation: Invocation,
    tool: Any,
    kwargs: Any,
    start_ns: int,
    error: BaseException,
) -> None:
    """A handoff tool (one that names its destination) raised: a failed handoff."""
    try:
        destination = (getattr(tool, "metadata", None) or {}).get("__handoff_destination")
        if not isinstance(destination, str) or isinstance(error, telemetry.bubble_types):
            return
        from_agent, graph_ns, name, call_id = _tool_identity(tool, kwargs)
        invocation.failed(
            error,
            from_agent=from_agent,
            to_agent=destination,
            trigger=sc.TRIGGER_TOOL,
            tool_name=name,
            tool_call_id=call_id,
            start_ns=start_ns,
            graph_ns=graph_ns,
            handler_end_ns=time.time_ns(),
        )
    except Exception as exc:
        report("LangGraph tool error", exc)


def _tool_identity(tool: Any, kwargs: Any) -> tuple[str | None, str, str | None, str | None]:
    """The agent running the tool, the namespace of the graph its ``Command(graph=PARENT)`` goes
    to, the tool's name and its call id (never its arguments).

    A tool runs in a node (``tools``) of the agent's graph, itself a node of the parent graph:
    ``"triage:<task>|tools:<task>"`` is agent ``triage`` of the top-level graph (``""``)."""
    segments = namespace_of(kwargs.get("metadata")).split("|")
    call_id = kwargs.get("tool_call_id")
    name = getattr(tool, "name", None)
    return (
        _node_name(segments[-2]) if len(segments) > 1 else None,
        "|".join(segments[:-2]),
        name if isinstance(name, str) else None,
        call_id if isinstance(call_id, str) else None,
    )


def _targets(telemetry: GraphTelemetry, goto: Any) -> list[str]:
    """``goto`` as node names: a name, a ``Send``, or a sequence of them (one handoff each)."""
    items = goto if isinstance(goto, (list, tuple)) else [goto]
    send_type = telemetry.send_type
    names = []
    for item in items:
        if isinstance(item, str) and item:
            names.append(item)
        elif send_type is not None and isinstance(item, send_type) and isinstance(item.node, str):
            names.append(item.node)
    return names


# --- the new agent's first model call ------------------------------------------------------------------


class FirstOutputHandler(BaseCallbackHandler):
    """Appended to the new agent's first model run's handlers, and gone again at its first token
    (or its end, or its failure), which ends the handoff: the rest of the answer reaches only the
    app's handlers. Last in the list, it leaves LangChain's loop over it at the end when it goes."""

    run_inline = True
    raise_error = False
    ignore_chain = ignore_agent = ignore_retriever = ignore_retry = ignore_custom_event = True

    def __init__(self, handoff: Handoff, handlers: list[BaseCallbackHandler]) -> None:
        self.handoff = handoff
        self.handlers = handlers

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self._spoke(None)

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self._spoke(None)

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        self._spoke(None if isinstance(error, _STOPPED) else error)

    def _spoke(self, error: BaseException | None) -> None:
        try:
            if self in self.handlers:
                self.handlers.remove(self)
            handoff = self.handoff
            if not handoff.done:
                handoff.invocation.spoke(handoff, error)
        except Exception as exc:
            report("LangGraph first output", exc)


def wrap_model_start(telemetry: GraphTelemetry) -> Any:
    """``CallbackManager.on_chat_model_start``/``on_llm_start``, once per model call, whatever
    method the agent calls: one counter test unless a handoff's new agent is about to speak."""

    def model_start(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.unspoken:
            return wrapped(*args, **kwargs)
        start_ns = time.time_ns()
        run_managers = wrapped(*args, **kwargs)
        _awaited(instance, run_managers, start_ns)
        return run_managers

    return model_start


def wrap_model_astart(telemetry: GraphTelemetry) -> Any:
    """The same on ``AsyncCallbackManager``: the coroutine is LangChain's unless awaited."""

    def model_start(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.unspoken:
            return wrapped(*args, **kwargs)
        return _observed_astart(instance, wrapped(*args, **kwargs), time.time_ns())

    return model_start


async def _observed_astart(manager: Any, starting: Any, start_ns: int) -> Any:
    run_managers = await starting
    _awaited(manager, run_managers, start_ns)
    return run_managers


def _awaited(manager: Any, run_managers: Any, start_ns: int) -> None:
    """A model run in the new agent's node: the first after a handoff to it is awaited."""
    try:
        invocation = _current()
        if invocation is None or not run_managers:
            return
        handoff = invocation.model_started(namespace_of(manager.metadata), start_ns)
        if handoff is not None:
            handlers = run_managers[0].handlers  # one list, shared by the call's runs
            handlers.append(FirstOutputHandler(handoff, handlers))
    except Exception as exc:
        report("LangGraph model start", exc)


# --- langgraph-supervisor's hand-back -------------------------------------------------------------------


def wrap_handback(telemetry: GraphTelemetry) -> Any:
    """``create_handoff_back_messages(agent_name, supervisor_name)``: the worker is done and hands
    back to the supervisor on its edge; the supervisor's next model call is part of it."""

    def handing_back(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        messages = wrapped(*args, **kwargs)
        invocation = _current()
        if invocation is not None:
            try:
                agent, supervisor = _handback_names(*args, **kwargs)
                # the worker's node: the supervisor is a node of the same graph
                worker_ns = namespace_of((var_child_runnable_config.get() or {}).get("metadata"))
                returned = messages[-1]
                name = getattr(returned, "name", None)
                call_id = getattr(returned, "tool_call_id", None)
                invocation.decided(
                    from_agent=agent,
                    to_agent=supervisor,
                    trigger=sc.TRIGGER_HANDBACK,
                    tool_name=name if isinstance(name, str) else None,
                    tool_call_id=call_id if isinstance(call_id, str) else None,
                    start_ns=time.time_ns(),
                    graph_ns=worker_ns.rpartition("|")[0],
                )
            except Exception as exc:
                report("LangGraph hand-back", exc)
        return messages

    return handing_back


def _handback_names(agent_name: str, supervisor_name: str) -> tuple[str, str]:
    return agent_name, supervisor_name
