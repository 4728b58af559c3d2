"""An unmodified LangGraph app (no tracing code), run offline: a swarm where triage hands off to
billing. Used by the auto-instrumentation tests as a user's `app.py`; the chat models are scripted
(no key, no network)."""

import warnings

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import create_handoff_tool, create_swarm

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


class ScriptedChatModel(BaseChatModel):
    script: list

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=self.script.pop(0))])


def main() -> None:
    handoff = AIMessage(content="", tool_calls=[{"name": "transfer_to_billing", "args": {}, "id": "call-1"}])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        triage = create_react_agent(
            ScriptedChatModel(script=[handoff]), [create_handoff_tool(agent_name="billing")], name="triage"
        )
        billing = create_react_agent(
            ScriptedChatModel(script=[AIMessage(content="Paid.")]), [], name="billing"
        )
    graph = create_swarm([triage, billing], default_active_agent="triage").compile(
        checkpointer=InMemorySaver()
    )
    result = graph.invoke(
        {"messages": [{"role": "user", "content": "I was charged twice"}]},
        {"configurable": {"thread_id": "t-1"}},
    )
    print("active agent:", result["active_agent"])


if __name__ == "__main__":
    main()
