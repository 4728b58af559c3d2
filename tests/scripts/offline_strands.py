"""An unmodified Strands Agents app (no tracing code), run offline: a swarm where triage hands off to
billing. Used by the auto-instrumentation tests as a user's `app.py`; the model is scripted (no key,
no network)."""

import asyncio
import json

from strands import Agent
from strands.models.model import Model
from strands.multiagent import Swarm


class ScriptedModel(Model):
    def __init__(self, script):
        self.script = list(script)
        self.config = {"model_id": "scripted"}

    def update_config(self, **model_config):
        self.config.update(model_config)

    def get_config(self):
        return self.config

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        reply = self.script.pop(0)
        yield {"messageStart": {"role": "assistant"}}
        if "to" in reply:
            tool_use = {"name": "handoff_to_agent", "toolUseId": "tooluse-1"}
            yield {"contentBlockStart": {"start": {"toolUse": tool_use}}}
            arguments = json.dumps({"agent_name": reply["to"], "message": "invoice question"})
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}}
        else:
            yield {"contentBlockDelta": {"delta": {"text": reply["text"]}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if "to" in reply else "end_turn"}}


def main() -> None:
    triage = Agent(
        name="triage",
        model=ScriptedModel([{"to": "billing"}, {"text": "Billing will help."}]),
        callback_handler=None,
    )
    billing = Agent(name="billing", model=ScriptedModel([{"text": "Paid."}]), callback_handler=None)
    result = asyncio.run(Swarm([triage, billing], entry_point=triage).invoke_async("I was charged twice"))
    print("agents:", [node.node_id for node in result.node_history])


if __name__ == "__main__":
    main()
