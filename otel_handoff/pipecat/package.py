"""What the Pipecat Flows instrumentor instruments, in the opentelemetry-python-contrib manner.

Flows ships inside pipecat-ai (``pipecat.flows``) from 1.5.0; the separate ``pipecat-ai-flows``
distribution stopped at 1.4.0. Lower bound only: a newer release is instrumented when every
wrap point holds (all or nothing), with one info line naming the tested range.
"""

_instruments = ("pipecat-ai >= 1.5.0",)  # Flows, and worker handoffs (in pipecat-ai from 1.3.0)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "pipecat-ai 1.5.0 to 1.14.0"
TESTED_WORKERS = "pipecat-ai 1.5.0 to 1.14.0 (worker handoffs)"
NEWEST_TESTED = "1.14.0"

_supports_metrics = True
