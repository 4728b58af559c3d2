"""What the LangGraph instrumentor instruments, in the opentelemetry-python-contrib manner.

The handoff is LangGraph's ``Command(goto=…, graph=Command.PARENT)`` returned by a tool, seen on
LangGraph's own path (its loop and task runner, LangChain's tool and model-start methods). 1.1.5 is
the oldest release ``pip install langgraph==X`` installs in working order today: older ones get
langgraph-prebuilt 1.0.13, which imports what only 1.1.5 has. Lower bound only: a newer release
is instrumented when every feature check holds (all or nothing), with one info line naming the
tested range.
"""

_instruments = ("langgraph >= 1.1.5",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "langgraph 1.1.5 to 1.2.24"
NEWEST_TESTED = "1.2.24"

_supports_metrics = True
