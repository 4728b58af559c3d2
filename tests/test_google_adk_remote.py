"""A Google ADK transfer to a remote agent over A2A: two processes on loopback, the real ADK and
a2a-sdk on both sides (``to_a2a()`` under uvicorn, ``RemoteA2aAgent``), only the models scripted
(``otel_handoff.cli.offline.google_adk_remote``).

The billing server starts once per scenario (module-scoped: each start imports ADK, about 2 s);
the calling side runs in this process on the test provider, or, for the joined trace, as an
unmodified app with ``OTEL_HANDOFF_AUTO_INSTRUMENT=true`` beside a server likewise, each writing
its spans to a file of its own.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="google-adk runs in its own environment (test_environments)")
pytest.importorskip("a2a", reason="a2a-sdk: google-adk[a2a]")

from google.adk.runners import InMemoryRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans

from otel_handoff.cli.offline import google_adk as ga
from otel_handoff.cli.offline import google_adk_remote as gr
from otel_handoff.cli.span_sources import read_spans
from otel_handoff.core import schema as sc
from otel_handoff.google_adk import GoogleADKHandoffInstrumentor

REMOTE_PHASES = [
    sc.SPAN_DELIVERY,
    sc.SPAN_TOOL,
    sc.SPAN_DELIVERY,
    sc.SPAN_SETUP,
    sc.SPAN_CONNECT,
    sc.SPAN_REQUEST,
    sc.SPAN_FIRST_OUTPUT,
]
# what A2A carries that a span must never: the user's words, the answers, and the transcript of
# triage's transfer that RemoteA2aAgent sends along ("For context: ...")
CONVERSATION = (*gr.QUESTIONS, *gr.ANSWERS[:2], "For context", "transfer_to_agent` tool")


@pytest.fixture(scope="module", autouse=True)
def adk_tracing_on(provider: TracerProvider) -> None:
    trace.set_tracer_provider(provider)


class Turn:
    """One user turn as the app saw it: each event, and when it reached the app."""

    def __init__(self) -> None:
        self.events: list[tuple[int, Any]] = []

    def first(self, author: str, *, content: bool | None = None) -> tuple[int, int]:
        """When ``author``'s first event (with content or without, or either) reached the app: after
        the event before it was received, and by the time the app's loop received it."""
        index = next(
            i for i, (_, e) in enumerate(self.events) if e.author == author and content in (None, _says(e))
        )
        return self.events[index - 1][0], self.events[index][0]


def _says(event: Any) -> bool:
    parts = event.content.parts if event.content and event.content.parts else []
    return any(p.text and not p.thought for p in parts)


async def converse(card_url: str, turns: int = 2, **options: Any) -> list[Turn]:
    """The app: ``turns`` user turns in one session, each transferred to the remote billing."""
    import time

    runner = InMemoryRunner(agent=gr.remote_agents(card_url, turns=turns, **options), app_name=ga.APP)
    session = await runner.session_service.create_session(app_name=ga.APP, user_id=ga.USER)
    seen = []
    with ga.quiet_adk_notices():
        for n in range(turns):
            turn = Turn()
            async for event in runner.run_async(
                user_id=ga.USER, session_id=session.id, new_message=ga.message(gr.QUESTIONS[n])
            ):
                turn.events.append((time.time_ns(), event))
            seen.append(turn)
    await runner.close()
    return seen


@pytest.fixture(scope="module")
def server() -> Any:
    with gr.remote_billing() as card_url:
        yield card_url


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(GoogleADKHandoffInstrumentor)
    return spans


def seconds(span: ReadableSpan) -> float:
    return (span.end_time - span.start_time) / 1e9


# --- the calling side ---------------------------------------------------------------------------


async def test_a_remote_transfer_is_one_handoff_until_the_remote_agents_first_content(
    traced: Spans, server: str, open_spans: OpenSpans
) -> None:
    turns = await converse(server)
    handoffs = traced.handoffs()
    assert len(handoffs) == 2  # the next turn goes back to triage, which transfers again
    for handoff, turn in zip(handoffs, turns, strict=True):
        attributes = handoff.attributes
        assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
        assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
        assert sc.ENDED_BY not in attributes  # not the run's end: billing's answer ended it
        assert handoff.status.status_code is StatusCode.UNSET
        assert attributes[sc.PROTOCOL] == sc.PROTOCOL_A2A
        assert attributes[sc.TO_AGENT_REMOTE_URL] == server
        children = traced.children(handoff)
        assert [c.name for c in children] == REMOTE_PHASES
        for earlier, later in itertools.pairwise(children):
            assert earlier.end_time <= later.start_time, (earlier.name, later.name)
        # phases and the unattributed rest account for the span (a rest under 1 ms is not reported)
        uncovered = seconds(handoff) - sum(seconds(c) for c in children)
        if sc.UNATTRIBUTED_DURATION in attributes:
            assert attributes[sc.UNATTRIBUTED_DURATION] == pytest.approx(uncovered, abs=1e-6)
        else:
            assert -1e-6 < uncovered < 0.001
        # the request ends at billing's first event (2.x: the task, a status; the stream is open;
        # 1.x with a2a-sdk 0.3: the answer itself); first output at its first content, not at a
        # status event, not at the run's end
        [request] = traced.children(handoff, sc.SPAN_REQUEST)
        after, by = turn.first("billing")
        assert after < request.end_time <= by
        after, by = turn.first("billing", content=True)
        assert after < handoff.end_time <= by
        assert handoff.end_time < turn.events[-1][0]
        # billing's model (150 ms) runs in the other process: within the request and first output
        assert attributes[sc.REQUEST_DURATION] + attributes[sc.FIRST_OUTPUT_DURATION] >= 0.15
    assert open_spans.ours() == []
    for span in traced.all():  # every attribute of ours: nothing of what A2A carried
        if span.instrumentation_scope.name.startswith("otel_handoff"):
            for key, value in span.attributes.items():
                assert not any(text in str(value) for text in CONVERSATION), (span.name, key)


def test_the_remote_url_keeps_no_credentials() -> None:
    from otel_handoff.google_adk._transfer import without_credentials

    url = "https://alice:s3cret@billing.example:8443/a2a/.well-known/agent-card.json?api_key=k#frag"
    assert without_credentials(url) == "https://billing.example:8443/a2a/.well-known/agent-card.json"
    assert without_credentials("http://[::1]:9000/card") == "http://[::1]:9000/card"


async def test_the_request_carries_the_handoff_and_a_delegation_the_current_span(
    traced: Spans, server: str
) -> None:
    """What went over the wire, seen by the app's own httpx client (a RemoteA2aAgent option)."""
    import httpx
    from google.adk.agents import LlmAgent
    from google.adk.tools import AgentTool

    sent: list[httpx.Headers] = []

    async def note(request: httpx.Request) -> None:
        if request.method == "POST":
            sent.append(request.headers)

    async with httpx.AsyncClient(event_hooks={"request": [note]}) as client:
        await converse(server, turns=1, httpx_client=client)
        [handoff] = traced.handoffs()
        [headers] = sent
        assert headers["traceparent"].split("-")[1:3] == [
            f"{handoff.context.trace_id:032x}",
            f"{handoff.context.span_id:016x}",
        ]
        # billing as a tool (AgentTool): a delegation, no handoff; its request carries ADK's span
        call = ga.types.FunctionCall(id="call-tool", name="billing", args={"request": gr.QUESTIONS[0]})
        asks = ga.LlmResponse(
            content=ga.types.Content(role="model", parts=[ga.types.Part(function_call=call)])
        )
        host = LlmAgent(
            name="host",
            model=ga.ScriptedLlm(model="host", script=[asks, ga.reply("done")]),
            tools=[AgentTool(agent=gr.remote_billing_agent(server, httpx_client=client))],
        )
        assert (await ga.run_text(host)).error is None
    assert len(traced.handoffs()) == 1
    delegation = sent[1]["traceparent"].split("-")
    tool_span = next(s for s in traced.all() if s.name == "execute_tool billing")
    assert delegation[1] == f"{tool_span.context.trace_id:032x}"
    assert int(delegation[2], 16) in {s.context.span_id for s in traced.all()}


# --- one trace across both processes ---------------------------------------------------------------


def _auto(service: str, export: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    return base | {
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_TRACES_EXPORTER": "otel_handoff_file",
        "OTEL_HANDOFF_EXPORT_FILE": str(export),
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": service,
    }


def _plain() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}


def two_processes(
    tmp: Path, *, client: bool, server: bool, turns: int = 2
) -> tuple[list[Any], list[Any], str]:
    """An unmodified client app and billing server, each auto-instrumented or not; their spans."""
    tmp.mkdir(parents=True, exist_ok=True)
    client_file, server_file = tmp / "client.jsonl", tmp / "server.jsonl"
    server_env = _auto("billing", server_file) if server else _plain()
    with gr.remote_billing(env=server_env) as card_url:
        run = subprocess.run(
            [sys.executable, "-m", gr.__name__, "--call", card_url, "--turns", str(turns)],
            env=_auto("triage", client_file) if client else _plain(),
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "otel-handoff" not in run.stderr
    read = lambda path: read_spans(str(path)) if path.exists() else []  # noqa: E731
    return read(client_file), read(server_file), run.stdout


@pytest.fixture(scope="module")
def both_instrumented(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any], str]:
    return two_processes(tmp_path_factory.mktemp("both"), client=True, server=True)


def test_one_trace_across_both_services_with_no_code_in_either(both_instrumented: Any) -> None:
    client, server, out = both_instrumented
    assert out.splitlines() == ["answered by: billing"] * 2, "the app itself must still work"
    handoffs = [s for s in client if s.name == sc.SPAN_HANDOFF]
    assert len(handoffs) == 2
    for handoff in handoffs:
        ids = {s.span_id for s in server if s.trace_id == handoff.trace_id}
        under = [s for s in server if s.trace_id == handoff.trace_id]
        # ADK's spans of the served agent, in the caller's trace, under the handoff (its top one:
        # 2.x's invoke_workflow, 1.x's invocation)
        [top] = [s for s in under if s.name in ("invoke_workflow billing", "invocation")]
        assert top.parent_id == handoff.span_id
        names = {s.name for s in under}
        assert {"invoke_agent billing", "generate_content scripted-billing"} <= names
        assert all(s.parent_id in ids or s.parent_id == handoff.span_id for s in under)
        # the server's set-up, from its own clock: request received until billing's model call
        [setup] = [s for s in under if s.name == sc.SPAN_REMOTE_SETUP]
        assert setup.parent_id == handoff.span_id
        assert setup.attributes[sc.REMOTE_SETUP_DURATION] == pytest.approx(
            (setup.end_ns - setup.start_ns) / 1e9
        )
        [model] = [s for s in under if s.name == "generate_content scripted-billing"]
        assert setup.end_ns <= model.start_ns
        # one machine, one clock: inside the caller's request and first output
        [request] = [s for s in client if s.name == sc.SPAN_REQUEST and s.parent_id == handoff.span_id]
        assert request.start_ns <= setup.start_ns and setup.end_ns <= handoff.end_ns


def test_instrumented_on_the_server_only_nothing_changes_for_the_client(tmp_path: Path) -> None:
    """The other way round (the caller instrumented, the server not) is every in-process test here."""
    client, server, out = two_processes(tmp_path, client=False, server=True, turns=1)
    assert out.splitlines() == ["answered by: billing"]
    assert client == []
    # no context came with the request: the server's spans are traces of their own, as before
    ids = {s.span_id for s in server}
    assert any(s.name == "invoke_agent billing" for s in server)
    assert all(s.parent_id is None or s.parent_id in ids for s in server)
    assert not any(s.name == sc.SPAN_REMOTE_SETUP for s in server)


def test_no_conversation_on_any_span_of_either_side(both_instrumented: Any) -> None:
    client, server, _ = both_instrumented
    ours = [s for s in client + server if s.name.startswith(sc.SPAN_HANDOFF)]
    assert ours
    for span in ours:
        for key, value in span.attributes.items():
            assert not any(text in str(value) for text in CONVERSATION), (span.name, key)


# --- failures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def refusing() -> Any:
    with gr.remote_billing(refuse=True) as card_url:
        yield card_url


@pytest.fixture(scope="module")
def cutting() -> Any:
    with gr.remote_billing(cut=True) as card_url:
        yield card_url


def what_the_app_saw(turns: list[Turn]) -> list[tuple[Any, ...]]:
    """Each event as the app reads it: author, error, texts (and whether thoughts), metadata keys;
    not the ids and times that differ between any two runs."""
    seen = []
    for turn in turns:
        for _, event in turn.events:
            parts = event.content.parts if event.content and event.content.parts else []
            texts = [(p.text, bool(p.thought)) for p in parts if p.text]
            seen.append(
                (
                    event.author,
                    event.error_code,
                    event.error_message,
                    texts,
                    sorted(event.custom_metadata or {}),
                )
            )
    return seen


async def test_the_app_sees_the_same_events_with_and_without_us(
    instrument: Any, spans: Spans, server: str
) -> None:
    plain = what_the_app_saw(await converse(server))
    instrument(GoogleADKHandoffInstrumentor)
    traced = what_the_app_saw(await converse(server))
    assert traced == plain
    assert [author for author, *_ in plain].count("billing") >= 2  # the scenario ran: billing answered
    assert len(spans.handoffs()) == 2


@pytest.mark.parametrize("how", ["down", "refusing", "cut"])
async def test_a_remote_that_fails_ends_the_handoff_with_a_reason_and_the_apps_error_unchanged(
    instrument: Any, spans: Spans, open_spans: OpenSpans, refusing: str, cutting: str, how: str
) -> None:
    async def attempt() -> list[Turn]:
        if how == "down":
            with gr.nothing_listening() as card_url:
                return await converse(card_url, turns=1)
        return await converse(refusing if how == "refusing" else cutting, turns=1)

    plain = await attempt()
    instrument(GoogleADKHandoffInstrumentor)
    traced = await attempt()
    # ADK reports the failure as an error event authored by billing, raising nothing: the same
    # with us
    error_events = [e for _, e in traced[0].events if e.error_message]
    assert len(error_events) == 1 and error_events[0].author == "billing"
    if how == "down":  # the same bound socket's URL is not the same between the two runs
        assert [a for a, *_ in what_the_app_saw(traced)] == [a for a, *_ in what_the_app_saw(plain)]
    else:
        assert what_the_app_saw(traced) == what_the_app_saw(plain)
    [handoff] = spans.handoffs()
    attributes = handoff.attributes
    assert handoff.status.status_code is StatusCode.ERROR
    expected = {
        "down": (sc.OUTCOME_ERROR, sc.ERROR_REMOTE_UNREACHABLE, None),
        "refusing": (sc.OUTCOME_REJECTED, sc.OUTCOME_REJECTED, sc.REJECTED_REMOTE_REFUSED),
        "cut": (sc.OUTCOME_ERROR, sc.ERROR_REMOTE_FAILED, None),
    }[how]
    assert (
        attributes[sc.OUTCOME],
        attributes[sc.ERROR_TYPE],
        attributes.get(sc.REJECTION_REASON),
    ) == expected
    if how == "refusing":
        assert attributes[sc.HTTP_RESPONSE_STATUS_CODE] == 403
    # ended at the error event, which the app received, not left open for the run's end
    error_at = next(t for t, e in traced[0].events if e.error_message)
    assert handoff.end_time <= error_at
    phases = [c.name for c in spans.children(handoff)]
    if how == "down":  # no request ever left
        assert phases[-1] == sc.SPAN_CONNECT and sc.SPAN_REQUEST not in phases
    elif how == "cut":  # the request left, its answer broke off
        assert sc.SPAN_REQUEST in phases
    assert open_spans.ours() == []


async def test_uninstrument_takes_every_wrapper_off_a2a_sdk(instrument: Any) -> None:
    from a2a.client.base_client import BaseClient
    from a2a.server.request_handlers import DefaultRequestHandler  # 1.x: its v2, 0.3: its own
    from google.adk.a2a.executor.a2a_agent_executor import A2aAgentExecutor
    from google.adk.a2a.utils.agent_to_a2a import to_a2a

    before = (BaseClient.__dict__["send_message"], DefaultRequestHandler.__dict__["__init__"])
    execute = A2aAgentExecutor.__dict__["execute"]
    instrumentor = instrument(GoogleADKHandoffInstrumentor)
    assert BaseClient.__dict__["send_message"] is not before[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ADK's [EXPERIMENTAL] notices
        app = to_a2a(gr.billing())
        async with app.router.lifespan_context(app):  # its start-up makes the request handler
            pass
    assert A2aAgentExecutor.__dict__["execute"] is not execute
    instrumentor.uninstrument()
    assert (BaseClient.__dict__["send_message"], DefaultRequestHandler.__dict__["__init__"]) == before
    assert A2aAgentExecutor.__dict__["execute"] is execute
