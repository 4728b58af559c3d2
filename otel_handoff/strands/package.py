"""What the Strands Agents instrumentor instruments, in the opentelemetry-python-contrib manner.

The handoff is a ``Swarm``'s ``handoff_to_agent`` tool, seen through the swarm's public event
stream (``Swarm.stream_async``). 1.17.0 is the oldest release whose swarm switches agents after the
old node's turn ends (``SwarmState.handoff_node``; up to 1.16 the tool switched in the middle of the
turn) and streams the ``multiagent_*`` events (since 1.15). Lower bound only: a newer release is
instrumented when every feature check holds (all or nothing), with one info line naming the
tested range.
"""

_instruments = ("strands-agents >= 1.17.0",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "strands-agents 1.17.0 to 1.62.0"
NEWEST_TESTED = "1.62.0"

_supports_metrics = True
