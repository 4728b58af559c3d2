"""A LangGraph swarm (langgraph-swarm), written as its documentation writes one, with no tracing code.

Only the chat models are stand-ins (scripted ones, so it runs with no key): use yours. Traced and
written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python langgraph_swarm_app.py
    otel-handoff summary spans.jsonl
"""

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import create_handoff_tool, create_swarm

from otel_handoff.cli.offline.langgraph import ScriptedChatModel  # stand-in for your chat model

to_billing = AIMessage(content="", tool_calls=[{"name": "transfer_to_billing", "args": {}, "id": "call-1"}])
answer = AIMessage(content="Your last invoice was paid in full.")
triage = create_agent(
    ScriptedChatModel(who="triage", script=[to_billing]),
    [create_handoff_tool(agent_name="billing")],
    system_prompt="Route the customer to the right specialist.",
    name="triage",
)
billing = create_agent(
    ScriptedChatModel(
        who="billing", script=[AIMessage(content="Your last invoice was paid in full.")], latency=0.12
    ),
    [create_handoff_tool(agent_name="triage")],
    system_prompt="Answer billing questions.",
    name="billing",
)
app = create_swarm([triage, billing], default_active_agent="triage").compile(checkpointer=InMemorySaver())

result = app.invoke(
    {"messages": [{"role": "user", "content": "Why was I charged twice?"}]},
    {"configurable": {"thread_id": "1"}},
)
print(result["messages"][-1].content)
