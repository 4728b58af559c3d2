"""What the LlamaIndex instrumentor instruments, in the opentelemetry-python-contrib manner.

The handoff is ``AgentWorkflow``'s built-in ``handoff`` tool, seen on the workflow's own steps
(``call_tool``, ``aggregate_tool_results``, ``run_agent_step``, ``parse_agent_output``) and the
LLM chat events of the new agent's first model call. LOWEST is the oldest release whose
``AgentWorkflow`` works this way (the one ``handoff`` tool reading ``ctx.store``, the switch in
``aggregate_tool_results``). Lower bound only: a newer release is instrumented when every wrap
point and feature check holds (all or nothing), with one info line naming the tested range.
"""

_instruments = ("llama-index-core >= 0.12.45",)

# what the version matrix (.ci/matrix.sh) passes
TESTED = "llama-index-core 0.12.45 to 0.14.25"
NEWEST_TESTED = "0.14.25"

_supports_metrics = True
