"""What the OpenAI Agents SDK instrumentor instruments, in the opentelemetry-python-contrib manner.

0.21.0 is the first release supported: every wrap point is there from 0.20.0 on, and 0.21.0 is the
first to ship the SDK's own scripted models (``agents.testing.ScriptedModel``,
``agents.realtime.testing.ScriptedRealtimeModel``), which our offline tests run the real SDK
with. Lower bound only: a newer release is instrumented when every wrap point holds its shape
(all or nothing), with one info line naming the tested range.
"""

_instruments = ("openai-agents >= 0.21.0",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "openai-agents 0.21.0 to 0.24.0"
NEWEST_TESTED = "0.24.0"

_supports_metrics = True
