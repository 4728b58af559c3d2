"""What the LiveKit instrumentor instruments, in the opentelemetry-python-contrib manner."""

_instruments = ("livekit-agents >= 1.2, < 2",)

_supports_metrics = True
