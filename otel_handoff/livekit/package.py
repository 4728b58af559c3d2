"""What the LiveKit instrumentor instruments, in the opentelemetry-python-contrib manner."""

# exactly the range the version matrix (.ci/matrix.sh) passes: 1.2.18 to 1.8.9, the newest
_instruments = ("livekit-agents >= 1.2.18, < 1.9",)

_supports_metrics = True
