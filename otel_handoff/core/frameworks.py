"""The one framework registry: what each traced framework is called, where, and how to install it.

The start-up hook (``_auto``), ``otel-handoff doctor`` and the command line read it; a test holds
it against pyproject.toml (entry points, extras, ``instruments-any``). Importing it imports
nothing else, so the start-up hook stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    """One framework an otel-handoff instrumentor traces."""

    key: str  # `otel-handoff demo --framework KEY`
    title: str  # for people
    entry_point: str  # in the `opentelemetry_instrumentor` group
    instrumentor: str  # "module:Class"
    extra: str  # `pip install 'otel-handoff[extra]'`
    extra_requires: tuple[str, ...]  # what that extra installs
    instruments: tuple[str, ...]  # the instrumentor's requirements (any of them), in `instruments-any`
    distributions: tuple[str, ...]  # any of these installs the framework
    modules: tuple[str, ...]  # the first import of any of these triggers auto-instrumentation
    # (module, "Class.method") where a session or chat starts: exporting is configured there
    starts_at: tuple[tuple[str, str], ...]
    demo_module: str  # what `otel-handoff demo --framework KEY` needs importable
    span_framework: str  # its spans' agent_handoff.framework
    duration: str  # what its agent_handoff.duration measures, for people (summary's legend)
    # (module, "Class.method") that readies a process for sessions before any of them, off their
    # event loop: exporting is configured once it returns, so no session's loop pays for it
    ready_at: tuple[tuple[str, str], ...] = ()
    # the venv the README installs it in: the shared one, or its own where it cannot share it
    venv: str = ".venv"
    # what its extra holds back beside the framework, so pip resolves it at once (no backtracking)
    extra_bounds: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The framework's name in a sentence: its title without the parenthesis."""
        return self.title.partition(" (")[0]

    @property
    def install_hint(self) -> str:
        """How to install it: into the venv the README names where that is one of its own."""
        if self.venv == SHARED_VENV:
            return install_command(self.extra)
        own = f"python3 -m venv {self.venv} && {self.venv}/bin/{install_command(self.extra)}"
        return f"{own} (a venv of its own)"

    @property
    def tested(self) -> str:
        """The releases the version matrix passes, as the instrumentor's ``package.py`` states them."""
        package = importlib.import_module(self.instrumentor.partition(":")[0] + ".package")
        return "; ".join(value for name, value in sorted(vars(package).items()) if name.startswith("TESTED"))


SHARED_VENV = ".venv"  # the README's "Try it" venv, where every other framework installs

FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        key="livekit",
        title="LiveKit Agents",
        entry_point="livekit_handoff",
        instrumentor="otel_handoff.livekit:LiveKitHandoffInstrumentor",
        extra="livekit",
        extra_requires=("livekit-agents>=1.2.18",),
        instruments=("livekit-agents>=1.2.18",),
        distributions=("livekit-agents",),
        modules=("livekit.agents",),
        # a job's context first: LiveKit starts the job's root span (job_entrypoint) before any session
        starts_at=(
            ("livekit.agents.job", "JobContext.__init__"),
            # 2.0's LiveSession, then 1.x's AgentSession (on 2.0 an alias `_auto` does not touch)
            ("livekit.agents.voice.agent_session", "LiveSession.start"),
            ("livekit.agents.voice.agent_session", "AgentSession.start"),
        ),
        demo_module="livekit.agents",
        span_framework="livekit-agents",
        duration="the sum of the work phases (no waits, no on_enter)",
        # an idle job process (or thread) after the app's prewarm (setup_fnc), before its job's loop
        ready_at=(("livekit.agents.ipc.job_proc_lazy_main", "_JobProc.initialize"),),
    ),
    Framework(
        key="ag2",
        title="AG2 (ag2 1.x workflow channels, classic autogen group chats)",
        entry_point="ag2_handoff",
        instrumentor="otel_handoff.ag2:AG2HandoffInstrumentor",
        extra="ag2",
        extra_requires=("ag2>=1.0",),  # the classic group chats: pip install autogen
        instruments=("ag2>=0.9.10", "autogen>=0.14"),
        distributions=("ag2", "autogen"),
        modules=("autogen", "ag2.network"),
        starts_at=(
            ("autogen.agentchat.groupchat", "GroupChatManager.run_chat"),
            ("autogen.agentchat.groupchat", "GroupChatManager.a_run_chat"),
            ("ag2.network.hub.core", "Hub.__init__"),
        ),
        demo_module="ag2.network",
        span_framework="ag2",
        duration="decision to the next speaker's turn",
    ),
    Framework(
        key="pipecat",
        title="Pipecat Flows",
        entry_point="pipecat_handoff",
        instrumentor="otel_handoff.pipecat:PipecatFlowsHandoffInstrumentor",
        extra="pipecat",
        extra_requires=("pipecat-ai>=1.5.0",),  # pipecat.flows, inside pipecat-ai since 1.5.0
        instruments=("pipecat-ai>=1.5.0",),
        distributions=("pipecat-ai",),
        modules=("pipecat.flows",),
        starts_at=(("pipecat.flows.manager", "FlowManager.__init__"),),
        demo_module="pipecat.flows",
        span_framework="pipecat-flows",
        duration="the sum of the work phases (no waits)",
    ),
    Framework(
        key="openai-agents",
        title="OpenAI Agents SDK (text runs, realtime sessions)",
        entry_point="openai_agents_handoff",
        instrumentor="otel_handoff.openai_agents:OpenAIAgentsHandoffInstrumentor",
        extra="openai-agents",
        extra_requires=("openai-agents>=0.21.0",),
        instruments=("openai-agents>=0.21.0",),
        distributions=("openai-agents",),
        modules=("agents",),
        starts_at=(
            ("agents.run", "AgentRunner.run"),
            ("agents.run", "AgentRunner.run_streamed"),
            ("agents.realtime.session", "RealtimeSession.__init__"),
        ),
        demo_module="agents",
        span_framework="openai-agents",
        duration="the model's handoff call to the new agent's first output",
    ),
    Framework(
        key="google-adk",
        title="Google ADK (text runs, live sessions)",
        entry_point="google_adk_handoff",
        instrumentor="otel_handoff.google_adk:GoogleADKHandoffInstrumentor",
        extra="google-adk",
        extra_requires=("google-adk>=1.39.1",),
        instruments=("google-adk>=1.39.1",),
        distributions=("google-adk",),
        modules=("google.adk",),
        starts_at=(
            ("google.adk.runners", "Runner.run_async"),
            ("google.adk.runners", "Runner.run_live"),
        ),
        demo_module="google.adk",
        span_framework="google-adk",
        duration="the transfer call to the new agent's first output (live: its first audio)",
        venv=".venv-google-adk",  # google-adk caps opentelemetry-sdk below what livekit-agents needs
        # google-adk 2.13 holds opentelemetry-api and -sdk at 1.44 (semantic conventions 0.65b0 pin 1.44.0)
        extra_bounds=(
            "opentelemetry-api<=1.44",
            "opentelemetry-sdk<=1.44",
            "opentelemetry-exporter-otlp<=1.44",
            "opentelemetry-instrumentation<=0.65b0",
        ),
    ),
    Framework(
        key="langgraph",
        title="LangGraph (swarm, supervisor, Command handoff tools)",
        entry_point="langgraph_handoff",
        instrumentor="otel_handoff.langgraph:LangGraphHandoffInstrumentor",
        extra="langgraph",
        extra_requires=("langgraph>=1.1.5", "langgraph-swarm>=0.1.0", "langgraph-supervisor>=0.0.31"),
        instruments=("langgraph>=1.1.5",),
        distributions=("langgraph",),
        modules=("langgraph.pregel",),  # langgraph itself is a namespace package: no import hook fires for it
        starts_at=(
            ("langgraph.pregel.main", "Pregel.stream"),
            ("langgraph.pregel.main", "Pregel.astream"),
        ),
        demo_module="langgraph_supervisor",
        span_framework="langgraph",
        duration="the handoff tool's start (a hand-back: the worker's end) to the new agent's first output",
    ),
    Framework(
        key="llama-index",
        title="LlamaIndex (AgentWorkflow handoffs)",
        entry_point="llama_index_handoff",
        instrumentor="otel_handoff.llama_index:LlamaIndexHandoffInstrumentor",
        extra="llama-index",
        extra_requires=("llama-index-core>=0.12.45",),
        instruments=("llama-index-core>=0.12.45",),
        distributions=("llama-index-core",),
        modules=("llama_index.core",),  # llama_index itself is a namespace package
        starts_at=(("llama_index.core.agent.workflow.multi_agent_workflow", "AgentWorkflow.run"),),
        demo_module="llama_index.core.agent.workflow",
        span_framework="llama-index",
        duration="the handoff tool's call to the new agent's first output",
    ),
    Framework(
        key="strands",
        title="Strands Agents (swarm handoff_to_agent)",
        entry_point="strands_handoff",
        instrumentor="otel_handoff.strands:StrandsHandoffInstrumentor",
        extra="strands",
        extra_requires=("strands-agents>=1.17.0",),
        instruments=("strands-agents>=1.17.0",),
        distributions=("strands-agents",),
        modules=("strands.multiagent",),
        starts_at=(("strands.multiagent.swarm", "Swarm.stream_async"),),
        demo_module="strands.multiagent",
        span_framework="strands",
        duration="the handoff tool call to the new agent's first output (the old agent's drain included)",
        # its opentelemetry-instrumentation-threading holds opentelemetry-api and -sdk at 1.45.1
        venv=".venv-strands",
        extra_bounds=(
            "opentelemetry-api<=1.45.1",
            "opentelemetry-sdk<=1.45.1",
            "opentelemetry-exporter-otlp<=1.45.1",
            "opentelemetry-instrumentation<=0.66b1",
        ),
    ),
    Framework(
        key="agent-framework",
        title="Microsoft Agent Framework (HandoffBuilder workflows)",
        entry_point="agent_framework_handoff",
        instrumentor="otel_handoff.agent_framework:AgentFrameworkHandoffInstrumentor",
        extra="agent-framework",
        extra_requires=("agent-framework-core>=1.9.0", "agent-framework-orchestrations>=1.0.0"),
        instruments=("agent-framework-core>=1.9.0", "agent-framework-orchestrations>=1.0.0"),
        distributions=("agent-framework-orchestrations",),
        modules=("agent_framework_orchestrations",),
        starts_at=(("agent_framework._workflows._workflow", "Workflow.run"),),
        demo_module="agent_framework_orchestrations",
        span_framework="agent-framework",
        duration="the handoff tool call to the target agent's first output (the superstep included)",
    ),
)
BY_KEY = {framework.key: framework for framework in FRAMEWORKS}
BY_SPAN_FRAMEWORK = {framework.span_framework: framework for framework in FRAMEWORKS}


def names() -> str:
    """Every framework by name, for a sentence that speaks of all of them (help texts, doctor):
    generated here, so a framework added to the registry is in each of them."""
    *first, last = [framework.name for framework in FRAMEWORKS]
    return f"{', '.join(first)} and {last}" if first else last


def any_hint() -> str:
    """When no framework is installed: the first extra, and the others."""
    return f"{FRAMEWORKS[0].install_hint} (or " + ", ".join(f"[{f.extra}]" for f in FRAMEWORKS[1:]) + ")"


def install_command(extra: str) -> str:
    """``pip install`` of otel-handoff with ``extra``, from where the user stands: the package index,
    or the checkout otel-handoff was installed from (pip's ``direct_url.json``, PEP 610) as ``.``
    from inside it, else its path, with ``-e`` if it was installed editable."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution
    from pathlib import Path
    from urllib.parse import unquote, urlsplit

    try:
        source = json.loads(distribution("otel-handoff").read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, ValueError):
        source = {}
    url = urlsplit(str(source.get("url", "")))
    if url.scheme != "file" or not isinstance(source.get("dir_info"), dict):
        return f"pip install 'otel-handoff[{extra}]'"
    checkout = Path(unquote(url.path))
    where = "." if Path.cwd().resolve() == checkout.resolve() else str(checkout)
    editable = "-e " if source["dir_info"].get("editable") else ""
    return f"pip install {editable}'{where}[{extra}]'"
