"""An OpenAI Agents SDK handoff, written as the SDK's documentation writes one, with no tracing code.

Only the models are stand-ins (the SDK's own scripted ones, so it runs with no key): use yours.
Traced and written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python openai_agents_handoff.py
    otel-handoff summary spans.jsonl
"""

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call  # stand-ins for your model

set_tracing_disabled(True)  # the SDK's own export to OpenAI, which needs your key

billing = Agent(
    name="billing",
    instructions="Answer billing questions.",
    model=ScriptedModel([[assistant_message("Your last invoice was paid in full.")]]),
)
triage = Agent(
    name="triage",
    instructions="Route the customer to the right specialist.",
    model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="call-1")]]),
    handoffs=[billing],
)

result = Runner.run_sync(triage, "Why was I charged twice?")
print(result.final_output)
