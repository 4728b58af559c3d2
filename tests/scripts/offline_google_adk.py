"""An unmodified Google ADK app (no tracing code), run offline: triage transfers to billing.

Used by the auto-instrumentation tests as a user's `app.py`. The model is a scripted ``BaseLlm``
(no key, no network); everything else is ADK's own ``InMemoryRunner``.
"""

import asyncio

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types


class ScriptedLlm(BaseLlm):
    script: list

    async def generate_content_async(self, llm_request, stream=False):
        await asyncio.sleep(0.01)
        yield self.script.pop(0)


def say(part: types.Part) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[part]))


async def main() -> None:
    transfer = types.FunctionCall(id="call-1", name="transfer_to_agent", args={"agent_name": "billing"})
    billing = LlmAgent(name="billing", model=ScriptedLlm(model="b", script=[say(types.Part(text="Paid."))]))
    triage = LlmAgent(
        name="triage",
        model=ScriptedLlm(model="t", script=[say(types.Part(function_call=transfer))]),
        sub_agents=[billing],
    )
    runner = InMemoryRunner(agent=triage, app_name="support")
    session = await runner.session_service.create_session(app_name="support", user_id="u1")
    question = types.Content(role="user", parts=[types.Part(text="I was charged twice")])
    last = None
    async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=question):
        last = event.author
    await runner.close()
    print("answered by:", last)


if __name__ == "__main__":
    asyncio.run(main())
