"""What the LiveKit instrumentor instruments, in the opentelemetry-python-contrib manner.

Lower bounds only: a release newer than the ones tested is instrumented when every wrap point
and feature check holds (all or nothing), with one info line naming the tested range.
"""

_instruments = ("livekit-agents >= 1.2.18",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "livekit-agents 1.2.18 to 1.8.9"
NEWEST_TESTED = "1.8.9"

_supports_metrics = True
