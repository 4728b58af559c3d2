"""What the Google ADK instrumentor instruments, in the opentelemetry-python-contrib manner.

1.39.1 (the last 1.x) is the oldest release tested: every wrap point (the ``PluginManager``
callbacks, the ``Runner`` entry points, ``BaseLlm.connect``, ``BaseLlmConnection``) is there
from the plugin system's arrival on, and ADK's text transfer runs nested in the old agent's flow
up to 1.39 and through the node runtime from 2.0. Lower bound only: a newer release is
instrumented when every wrap point holds its shape (all or nothing), with one info line naming
the tested range.
"""

_instruments = ("google-adk >= 1.39.1",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "google-adk 1.39.1 to 2.13.0"
NEWEST_TESTED = "2.13.0"

_supports_metrics = True
