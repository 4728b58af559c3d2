"""A Google ADK agent tree with a transfer, written as ADK's documentation writes one, with no
tracing code.

Only the models are stand-ins (scripted ones, so it runs with no key): use yours. Traced and
written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python google_adk_transfer.py
    otel-handoff summary spans.jsonl
"""

import asyncio

from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.genai import types

from otel_handoff.cli.offline.google_adk import ScriptedLlm, reply, transfer_call  # stand-ins for your model

billing = LlmAgent(
    name="billing",
    description="Answers billing questions.",
    instruction="Answer billing questions.",
    model=ScriptedLlm(model="billing", script=[reply("Your last invoice was paid in full.")], latency=0.12),
)
triage = LlmAgent(
    name="triage",
    description="Routes the customer.",
    instruction="Route the customer to the right specialist.",
    model=ScriptedLlm(model="triage", script=[transfer_call("billing")]),
    sub_agents=[billing],
)


async def main() -> None:
    runner = InMemoryRunner(agent=triage, app_name="support")
    session = await runner.session_service.create_session(app_name="support", user_id="user")
    question = types.Content(role="user", parts=[types.Part(text="Why was I charged twice?")])
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=question):
        if event.is_final_response() and event.content and event.content.parts:
            print(event.content.parts[0].text)
    await runner.close()


asyncio.run(main())
