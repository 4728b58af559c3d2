"""What the LiveKit instrumentor instruments, in the opentelemetry-python-contrib manner.

Lower bounds only: a release newer than the ones tested is instrumented when every wrap point
and feature check holds (all or nothing), with one info line naming the tested range.
"""

_instruments = ("livekit-agents >= 1.2.18",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "livekit-agents 1.2.18 to 1.8.9, 2.0.0b1 (pre-release)"
NEWEST_TESTED = "1.8.9"
# pre-releases the matrix passes: tested themselves, without making a 1.8.x after 1.8.9 tested
PRERELEASES_TESTED = ("2.0.0b1",)

_supports_metrics = True
