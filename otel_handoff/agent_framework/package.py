"""What the Microsoft Agent Framework instrumentor instruments, in the opentelemetry-python-contrib manner.

The handoff is a ``HandoffBuilder`` workflow's ``handoff_to_<target>`` tool, which
``agent-framework-orchestrations`` 1.0.0 (the first release of the orchestrations as a package of
their own, needing ``agent-framework-core`` 1.9.0) intercepts in a function middleware and sends
to the target in the workflow's next superstep. Before, the orchestration lived in
``agent_framework._workflows._handoff`` (the 2025 prereleases of ``agent-framework-core``): not
traced. Lower bound only: a newer release is instrumented when every wrap point and feature check
holds (all or nothing), with one info line naming the tested range.
"""

_instruments = ("agent-framework-core >= 1.9.0", "agent-framework-orchestrations >= 1.0.0")

# what the version matrix (.ci/matrix.sh) passes
TESTED = "agent-framework-core 1.9.0 to 1.23.0 with agent-framework-orchestrations 1.0.0 to 1.4.0"
NEWEST_TESTED = "1.23.0"

_supports_metrics = True
