"""otel-handoff: OpenTelemetry tracing of agent handoffs (LiveKit Agents, AG2, Pipecat Flows, the
OpenAI Agents SDK, Google ADK, LangGraph, LlamaIndex, Strands Agents, Microsoft Agent Framework;
``otel_handoff.core.frameworks`` is the registry)."""

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .export import Configuration, configure

__all__ = ["Configuration", "__version__", "configure"]


def __getattr__(name: str) -> Any:
    # lazy: `import otel_handoff` stays cheap, the SDK is imported when configure is used
    if name in ("configure", "Configuration"):
        from . import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
