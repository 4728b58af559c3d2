"""A LlamaIndex ``AgentWorkflow``, written as LlamaIndex's documentation writes one, with no
tracing code.

Only the LLM is a stand-in (a scripted one, so it runs with no key): use your own. Traced and
written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python llama_index_workflow.py
    otel-handoff summary spans.jsonl
"""

import asyncio

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent

from otel_handoff.cli.offline.llama_index import ScriptedLLM, handoff_call  # stand-in for your LLM

triage = FunctionAgent(
    name="triage",
    description="Routes the customer.",
    system_prompt="Route the customer to the right specialist.",
    llm=ScriptedLLM([handoff_call("billing", "call-1")]),
    can_handoff_to=["billing"],
)
billing = FunctionAgent(
    name="billing",
    description="Answers billing questions.",
    system_prompt="Answer billing questions.",
    llm=ScriptedLLM([{"text": "Your last invoice was paid in full."}], latency=0.12),
)
workflow = AgentWorkflow(agents=[triage, billing], root_agent="triage")


async def main() -> None:
    response = await workflow.run(user_msg="Why was I charged twice?")
    print(response)


asyncio.run(main())
