"""An OpenAI Agents SDK app in a venv where every framework is installed (tests/test_auto_instrument.py).

``configure``: calls otel_handoff.configure() first; ``plain``: leaves it to opentelemetry-instrument;
``uninstrument``: instruments, uninstruments, then imports. Then it imports the SDK, runs a handoff,
and prints one JSON line: which frameworks were imported, and whether the SDK got instrumented.
"""

import asyncio
import json
import sys

FRAMEWORK_MODULES = ("livekit.agents", "ag2", "autogen", "pipecat", "agents")

mode = sys.argv[1]
if mode == "configure":
    import otel_handoff

    otel_handoff.configure()
elif mode == "uninstrument":
    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

    OpenAIAgentsHandoffInstrumentor().instrument()
    OpenAIAgentsHandoffInstrumentor().uninstrument()
before = [m for m in FRAMEWORK_MODULES if m in sys.modules]

from otel_handoff.cli.offline import openai_agents as oa  # noqa: E402  (imports the SDK, `agents`)
from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor  # noqa: E402

oa.quiet_sdk_tracing()
asyncio.run(oa.run_text(oa.TextScenario()))
print(
    "REPORT",
    json.dumps(
        {
            "imported_before_the_app": before,
            "imported": [m for m in FRAMEWORK_MODULES if m in sys.modules],
            "instrumented": OpenAIAgentsHandoffInstrumentor().is_instrumented_by_opentelemetry,
        }
    ),
)
