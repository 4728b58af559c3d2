"""A Strands Agents swarm, written as Strands' documentation writes one, with no tracing code.

Only the model is a stand-in (a scripted one, so it runs with no key): use your own. Traced and
written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python strands_swarm.py
    otel-handoff summary spans.jsonl
"""

from strands import Agent
from strands.multiagent import Swarm

from otel_handoff.cli.offline.strands import ScriptedModel  # stand-in for your model

triage = Agent(
    name="triage",
    system_prompt="Route the customer to the right specialist.",
    model=ScriptedModel("triage", [{"handoff": "billing"}, {"text": "Billing will help you."}]),
    callback_handler=None,
)
billing = Agent(
    name="billing",
    system_prompt="Answer billing questions.",
    model=ScriptedModel("billing", [{"text": "Your last invoice was paid in full."}], latency=0.12),
    callback_handler=None,
)
swarm = Swarm([triage, billing], entry_point=triage)

result = swarm("Why was I charged twice?")
print(result.status, [node.node_id for node in result.node_history])
