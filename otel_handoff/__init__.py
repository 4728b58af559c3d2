"""otel-handoff: OpenTelemetry tracing of agent handoffs (LiveKit Agents, AG2)."""

from .version import __version__

__all__ = ["__version__"]
