"""Span names, attribute keys and values of the otel-handoff schema, each defined once.

These names are a public contract: dashboards, the summary command and users' queries
depend on them. The README's span table documents every entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- span names -------------------------------------------------------------------------
SPAN_HANDOFF = "agent_handoff"
SPAN_QUEUE_WAIT = "agent_handoff.queue_wait"
SPAN_LOCK_WAIT = "agent_handoff.lock_wait"
SPAN_DRAIN = "agent_handoff.drain"
SPAN_PAUSE = "agent_handoff.pause"
SPAN_CLOSE = "agent_handoff.close"
SPAN_START = "agent_handoff.start"
SPAN_RESUME = "agent_handoff.resume"
SPAN_ON_ENTER = "agent_handoff.on_enter"
SPAN_LOOP_WAIT = "agent_handoff.loop_wait"
SPAN_PREPARE = "agent_handoff.prepare"
SPAN_SWITCH = "agent_handoff.switch"
SPAN_REALTIME_UPDATE = "agent_handoff.realtime_update"
SPAN_RECONNECT = "agent_handoff.reconnect"
SPAN_FIRST_SPEECH = "agent_handoff.first_speech"

# --- attributes borrowed from the GenAI semantic conventions ---------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"  # only where the framework or app knows it
ERROR_TYPE = "error.type"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"  # a remote agent's server answered an error

OPERATION_HANDOFF = "agent_handoff"

# --- otel-handoff attributes (GenAI semconv defines no handoff attributes) --------------
FROM_AGENT_NAME = "agent_handoff.from_agent.name"
TO_AGENT_NAME = "agent_handoff.to_agent.name"
FROM_AGENT_ID = "agent_handoff.from_agent.id"
TO_AGENT_ID = "agent_handoff.to_agent.id"
FRAMEWORK = "agent_handoff.framework"
FRAMEWORK_VERSION = "agent_handoff.framework.version"
PREVIOUS_ACTIVITY = "agent_handoff.previous_activity"
NEW_ACTIVITY = "agent_handoff.new_activity"
TRIGGER = "agent_handoff.trigger"
STT_REUSED = "agent_handoff.stt_reused"
REALTIME_SESSION_REUSED = "agent_handoff.realtime_session_reused"
TURN_DETECTOR_REUSED = "agent_handoff.turn_detector_reused"
QUEUE_WAIT_DURATION = "agent_handoff.queue_wait.duration"
LOCK_WAIT_DURATION = "agent_handoff.lock_wait.duration"
DRAIN_DURATION = "agent_handoff.drain.duration"
PAUSE_DURATION = "agent_handoff.pause.duration"
CLOSE_DURATION = "agent_handoff.close.duration"
START_DURATION = "agent_handoff.start.duration"
RESUME_DURATION = "agent_handoff.resume.duration"
ON_ENTER_DURATION = "agent_handoff.on_enter.duration"
LOOP_WAIT_DURATION = "agent_handoff.loop_wait.duration"
PREPARE_DURATION = "agent_handoff.prepare.duration"
SWITCH_DURATION = "agent_handoff.switch.duration"
DURATION = "agent_handoff.duration"
# the handoff's time no phase covers (1 ms or more in all): phases and it account for the span
UNATTRIBUTED_DURATION = "agent_handoff.unattributed.duration"
OUTCOME = "agent_handoff.outcome"
SEQUENCE = "agent_handoff.sequence"
KIND = "agent_handoff.kind"  # AG2: which mechanism decided the handoff
LOCK = "agent_handoff.lock"
STT_REUSE_BLOCKED_BY = "agent_handoff.stt.reuse_blocked_by"
REALTIME_REUSE_BLOCKED_BY = "agent_handoff.realtime_session.reuse_blocked_by"
REALTIME_UPDATE_KIND = "agent_handoff.realtime_update.kind"
REALTIME_UPDATE_DURATION = "agent_handoff.realtime_update.duration"
RECONNECT_RESOURCE = "agent_handoff.reconnect.resource"
RECONNECT_DURATION = "agent_handoff.reconnect.duration"
FIRST_SPEECH_DELAY = "agent_handoff.first_speech.delay"
# first speech, as the caller hears it: estimated from the agent's WebRTC statistics (core/heard.py)
FIRST_SPEECH_HEARD_DELAY = "agent_handoff.first_speech.heard_delay"
# why there is none: no_statistics, no_round_trip or unknown_codec (core/heard.py)
FIRST_SPEECH_HEARD_DELAY_MISSING = "agent_handoff.first_speech.heard_delay_missing"
DOWNLINK_ROUND_TRIP_TIME = "agent_handoff.downlink.round_trip_time"
DOWNLINK_JITTER = "agent_handoff.downlink.jitter"
DOWNLINK_PACKETS_LOST = "agent_handoff.downlink.packets_lost"
DOWNLINK_PACKET_DURATION = "agent_handoff.downlink.packet_duration"
DOWNLINK_CODEC = "agent_handoff.downlink.codec"
# the legs of the way to the caller the downlink's statistics describe (core/heard.py): a peer to
# peer call's one leg, or in an SFU's room only the agent's leg to the server
DOWNLINK_LEGS = "agent_handoff.downlink.legs"
LEG_AGENT_CALLER = "agent_caller"
LEG_AGENT_SERVER = "agent_server"
# what an SFU tells the agent of the caller's own leg: its rating of the caller's connection
# (LiveKit: excellent, good, poor, lost), not in the estimate
CALLER_CONNECTION_QUALITY = "agent_handoff.caller.connection_quality"
REJECTION_REASON = "agent_handoff.rejection_reason"

# --- metrics -------------------------------------------------------------------------
METRIC_DURATION = "agent_handoff.duration"
METRIC_PHASE_DURATION = "agent_handoff.phase.duration"
PHASE = "agent_handoff.phase"
# about 1 ms to 30 s: an offline handoff is ~1 ms, a realtime reconnect can take seconds
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# span attributes that are also metric attributes: bounded cardinality, nothing per call
METRIC_ATTRIBUTES = (
    FROM_AGENT_NAME,
    TO_AGENT_NAME,
    FRAMEWORK,
    TRIGGER,
    KIND,
    OUTCOME,
    STT_REUSED,
    REALTIME_SESSION_REUSED,
    TURN_DETECTOR_REUSED,
)
PHASE_METRIC_ATTRIBUTES = (FROM_AGENT_NAME, TO_AGENT_NAME, FRAMEWORK, KIND)
# handoff tool calls the framework refused before any handoff (a target the agent may not reach):
# no span, a count; never the tool's or the target's name, which the model can make up
METRIC_UNREACHABLE_CALLS = "agent_handoff.unreachable_calls"
UNREACHABLE_METRIC_ATTRIBUTES = (FRAMEWORK, FROM_AGENT_NAME)

PHASE_QUEUE_WAIT = "queue_wait"
PHASE_LOCK_WAIT = "lock_wait"
PHASE_ON_ENTER = "on_enter"
# LiveKit: a task of the handoff (its own, update_agent() spawned; the new agent's on_enter)
# waiting for the event loop to run its first step
PHASE_LOOP_WAIT = "loop_wait"
# LiveKit: _update_activity, the session lock held, before the old agent leaves (the new
# AgentActivity made, LiveKit's update_agent span started)
PHASE_PREPARE = "prepare"
# LiveKit: the old activity gone to the new one's start: the session's activity switched, the
# AgentHandoff item added, conversation_item_added emitted (the app's handlers run there)
PHASE_SWITCH = "switch"

# --- values ----------------------------------------------------------------------------
FRAMEWORK_LIVEKIT = "livekit-agents"

TRIGGER_TOOL = "tool"
TRIGGER_API = "api"
TRIGGER_TASK = "task"
TRIGGER_DEFERRED_TOOL = "deferred_tool"

OUTCOME_COMPLETED = "completed"
OUTCOME_ERROR = "error"
OUTCOME_SKIPPED = "skipped"
OUTCOME_REJECTED = "rejected"

# error.type values that are not an exception's type name
ERROR_TIMEOUT = "timeout"  # the framework gave up waiting
ERROR_CANCELLED = "cancelled"  # the handoff's task was cancelled outside a session close

# why a resource was not handed to the new agent: the framework's own conditions
BLOCKED_RELEASE = "framework_version"  # this livekit-agents release cannot reuse (< 1.5.3)
BLOCKED_DETACH_FAILED = "detach_failed"
BLOCKED_NO_AUDIO_INPUT = "no_audio_input"
BLOCKED_NO_STT = "no_stt"
BLOCKED_STT_INSTANCE = "stt_instance"
BLOCKED_STT_NODE = "stt_node"
BLOCKED_NO_REALTIME_SESSION = "no_realtime_session"
BLOCKED_MODEL = "model"
BLOCKED_CHAT_CTX = "chat_ctx"
BLOCKED_INSTRUCTIONS = "instructions"
BLOCKED_TOOLS = "tools"
BLOCKED_TURN_DETECTION = "turn_detection"

REALTIME_UPDATE_INSTRUCTIONS = "instructions"
REALTIME_UPDATE_CHAT_CTX = "chat_ctx"
REALTIME_UPDATE_TOOLS = "tools"
REALTIME_UPDATE_SESSION = "session"
# RealtimeSession method -> agent_handoff.realtime_update.kind
REALTIME_UPDATE_METHODS = {
    "update_instructions": REALTIME_UPDATE_INSTRUCTIONS,
    "update_chat_ctx": REALTIME_UPDATE_CHAT_CTX,
    "update_tools": REALTIME_UPDATE_TOOLS,
    "update_options": REALTIME_UPDATE_SESSION,
}
RESOURCE_REALTIME_SESSION = "realtime_session"
RESOURCE_STT = "stt"
PHASE_FIRST_SPEECH = "first_speech"
PHASE_RECONNECT = "reconnect"

LOCK_SESSION = "session"
LOCK_ACTIVITY = "activity"

# previous/new activity modes, as the framework names them
CLOSE = "close"
PAUSE = "pause"
DRAIN = "drain"
START = "start"
RESUME = "resume"

# --- AG2 -------------------------------------------------------------------------------
# group chats of the classic `autogen` package (ag2 0.9 to 0.14, autogen 0.14)
SPAN_CHAT = "agent_handoff.chat"  # root of a chat's handoffs when the app does not trace the chat

CONDITION_TYPE = "agent_handoff.condition.type"
TARGET_TYPE = "agent_handoff.target.type"
NEXT_SPEAKER = "agent_handoff.next_speaker"
CHAT_HANDOFFS = "agent_handoff.chat.handoffs"

FRAMEWORK_AG2 = "ag2"

KIND_AFTER_WORK = "after_work"
KIND_CONTEXT_CONDITION = "context_condition"
KIND_LLM_CONDITION = "llm_condition"
KIND_REPLY_RESULT = "reply_result"
KIND_TOOL = "tool"
KIND_GROUP_AFTER_WORK = "group_after_work"
KIND_GUARDRAIL = "guardrail"

# workflow channels of ag2 1.x (`ag2.network`)
KIND_TRANSITION = "transition"  # a static rule of the TransitionGraph matched
KIND_TOOL_CALLED = "tool_called"  # a ToolCalled rule matched
KIND_HANDOFF = "handoff"  # a tool returned Handoff
KIND_FINISH = "finish"  # a tool returned Finish
KIND_DEFAULT = "default"  # no rule matched: the graph's default_target
KIND_MAX_TURNS = "max_turns"  # the turn limit closed the channel

# --- Pipecat Flows -------------------------------------------------------------------------
# node transitions of `pipecat.flows` (pipecat-ai 1.5 and later)
FRAMEWORK_PIPECAT = "pipecat-flows"

SPAN_FUNCTION_CALL_WAIT = "agent_handoff.function_call_wait"
SPAN_HANDLER = "agent_handoff.handler"
SPAN_PRE_ACTIONS = "agent_handoff.pre_actions"
SPAN_POST_ACTIONS = "agent_handoff.post_actions"
SPAN_SUMMARY = "agent_handoff.summary"
SPAN_CONTEXT_UPDATE = "agent_handoff.context_update"

FUNCTION_CALL_WAIT_DURATION = "agent_handoff.function_call_wait.duration"
HANDLER_DURATION = "agent_handoff.handler.duration"
PRE_ACTIONS_DURATION = "agent_handoff.pre_actions.duration"
POST_ACTIONS_DURATION = "agent_handoff.post_actions.duration"
SUMMARY_DURATION = "agent_handoff.summary.duration"
CONTEXT_UPDATE_DURATION = "agent_handoff.context_update.duration"
CONTEXT_STRATEGY = "agent_handoff.context_strategy"  # append, reset or reset_with_summary
ACTIONS = "agent_handoff.actions"  # the action types of a pre_actions / post_actions span


PHASE_FUNCTION_CALL_WAIT = "function_call_wait"
PHASE_HANDLER = "handler"
PHASE_PRE_ACTIONS = "pre_actions"
PHASE_SUMMARY = "summary"
PHASE_CONTEXT_UPDATE = "context_update"
PHASE_POST_ACTIONS = "post_actions"
PHASE_REALTIME_UPDATE = "realtime_update"

# --- OpenAI Agents SDK -----------------------------------------------------------------------
# text runs (Runner.run, run_sync, run_streamed) and realtime sessions (agents.realtime)
FRAMEWORK_OPENAI_AGENTS = "openai-agents"

SPAN_ON_HANDOFF = "agent_handoff.on_handoff"
SPAN_HOOKS = "agent_handoff.hooks"
SPAN_INPUT_FILTER = "agent_handoff.input_filter"
SPAN_SETUP = "agent_handoff.setup"
SPAN_FIRST_OUTPUT = "agent_handoff.first_output"
SPAN_SETTINGS = "agent_handoff.settings"
SPAN_SESSION_UPDATE = "agent_handoff.session_update"
SPAN_RESPONSE_DRAIN = "agent_handoff.response_drain"
SPAN_FIRST_AUDIO = "agent_handoff.first_audio"

ON_HANDOFF_DURATION = "agent_handoff.on_handoff.duration"
HOOKS_DURATION = "agent_handoff.hooks.duration"
INPUT_FILTER_DURATION = "agent_handoff.input_filter.duration"
SETUP_DURATION = "agent_handoff.setup.duration"
FIRST_OUTPUT_DURATION = "agent_handoff.first_output.duration"
SETTINGS_DURATION = "agent_handoff.settings.duration"
SESSION_UPDATE_DURATION = "agent_handoff.session_update.duration"
RESPONSE_DRAIN_DURATION = "agent_handoff.response_drain.duration"
FIRST_AUDIO_DURATION = "agent_handoff.first_audio.duration"

FRAMEWORK_TRACE_ID = "agent_handoff.framework.trace_id"  # the framework's own trace (SDK: trace_…)
STREAMED = "agent_handoff.streamed"  # a text run streamed: first output is the first delta
OLD_RESPONSE_RUNNING = "agent_handoff.old_response_running"  # realtime: still speaking at the handoff
# realtime: the caller interrupted during the handoff; Strands: the swarm was interrupted (a human-in-the-loop
# interrupt) during the handoff and this span is the run that resumed it
INTERRUPTED = "agent_handoff.interrupted"
ENDED_BY = "agent_handoff.ended_by"  # set only when the new agent's first output never came

TRIGGER_REALTIME_TOOL = "realtime_tool"
REJECTED_MULTIPLE = "multiple_handoffs"  # the model asked for several; the SDK runs the first
ENDED_BY_RUN_END = "run_ended"
ENDED_BY_SESSION_CLOSE = "session_closed"

PHASE_ON_HANDOFF = "on_handoff"
PHASE_HOOKS = "hooks"
PHASE_INPUT_FILTER = "input_filter"
PHASE_SETUP = "setup"
PHASE_FIRST_OUTPUT = "first_output"
PHASE_SETTINGS = "settings"
PHASE_SESSION_UPDATE = "session_update"
PHASE_RESPONSE_DRAIN = "response_drain"
PHASE_FIRST_AUDIO = "first_audio"

# --- Google ADK ----------------------------------------------------------------------------
# transfers through EventActions.transfer_to_agent, in text runs (Runner.run_async) and live
# (voice) sessions (Runner.run_live)
FRAMEWORK_GOOGLE_ADK = "google-adk"

SPAN_TOOL = "agent_handoff.tool"
# ADK: the app's loop taking each event; Pipecat Flows: the function result's way back to Flows
SPAN_DELIVERY = "agent_handoff.delivery"
SPAN_TRANSFER_DELAY = "agent_handoff.transfer_delay"
SPAN_CONNECT = "agent_handoff.connect"
SPAN_SEND_HISTORY = "agent_handoff.send_history"

TOOL_DURATION = "agent_handoff.tool.duration"
DELIVERY_DURATION = "agent_handoff.delivery.duration"
TRANSFER_DELAY_DURATION = "agent_handoff.transfer_delay.duration"
CONNECT_DURATION = "agent_handoff.connect.duration"
SEND_HISTORY_DURATION = "agent_handoff.send_history.duration"

# the framework's fixed wait before a live transfer, in seconds, as configured in the release
TRANSFER_DELAY_CONFIGURED = "agent_handoff.transfer_delay.configured"
# LangGraph: checkpoints its checkpointer saved while the handoff was in flight
CHECKPOINT_WRITES = "agent_handoff.checkpoint_writes"
FRAMEWORK_INVOCATION_ID = "agent_handoff.framework.invocation_id"  # ADK: one run's invocation (e-…)
FRAMEWORK_PATH = "agent_handoff.framework.path"  # ADK: which runtime switched agents

TRIGGER_LIVE_TOOL = "live_tool"
TRIGGER_EVENT = "event"  # ADK: an event (not a tool) set the transfer
PATH_NODE = "node"  # google-adk 2.x node runtime (an LlmAgent root): the scheduler starts the new agent
PATH_NESTED = "nested"  # the new agent runs inside the old one's flow (other roots, 1.x)
PATH_LIVE = "live"  # a live session: the new agent runs inside the old one's live flow
REJECTED_UNKNOWN_AGENT = "unknown_agent"  # the agent tree has no agent of that name
REJECTED_NOT_ALLOWED = "transfer_not_allowed"  # disallow_transfer_to_parent/peers ruled it out

PHASE_TOOL = "tool"
PHASE_DELIVERY = "delivery"
PHASE_TRANSFER_DELAY = "transfer_delay"
PHASE_CONNECT = "connect"
PHASE_SEND_HISTORY = "send_history"

# a transfer to a remote agent (ADK's RemoteA2aAgent, over A2A): the target runs in another process
SPAN_REQUEST = "agent_handoff.request"
SPAN_REMOTE_SETUP = "agent_handoff.remote_setup"
REQUEST_DURATION = "agent_handoff.request.duration"
REMOTE_SETUP_DURATION = "agent_handoff.remote_setup.duration"
# the target's address, scheme://host:port/path (never userinfo, query or fragment): it is remote
TO_AGENT_REMOTE_URL = "agent_handoff.to_agent.remote.url"
PROTOCOL = "agent_handoff.protocol"  # how the handoff reached the remote agent
PROTOCOL_A2A = "a2a"
PHASE_REQUEST = "request"  # the request sent until the remote agent's first event reaches the app
PHASE_REMOTE_SETUP = "remote_setup"  # the serving process: the request received until its agent's model call
ERROR_REMOTE_UNREACHABLE = "remote_unreachable"  # no request left: the card or the connection failed
ERROR_REMOTE_FAILED = "remote_failed"  # the request left; its stream broke or the remote task failed
REJECTED_REMOTE_REFUSED = "remote_refused"  # the remote server answered the request with an HTTP error

# --- LangGraph ----------------------------------------------------------------------------------
# handoffs of multi-agent graphs: a tool returning Command(graph=Command.PARENT), and a supervisor's
# worker handing back on its edge
FRAMEWORK_LANGGRAPH = "langgraph"
TRIGGER_HANDBACK = "handback"  # a worker's static edge back to its supervisor
REJECTED_TARGET_NOT_RUN = "target_not_run"  # the graph ended without running the handoff's target

# --- Strands Agents ---------------------------------------------------------------------------
# a Swarm's handoff_to_agent tool: the swarm switches once the old agent's turn ends
FRAMEWORK_STRANDS = "strands"
# the old agent's model calls after the handoff tool, before its turn ended (0: the app ended it)
DRAIN_MODEL_CALLS = "agent_handoff.drain.model_calls"
SUPERSEDED_COUNT = "agent_handoff.superseded_count"  # other handoff calls of the turn, not taken
# why the swarm stopped before running the target (its own limits, or a hook cancelling the node)
REJECTED_MAX_HANDOFFS = "max_handoffs"
REJECTED_MAX_ITERATIONS = "max_iterations"
REJECTED_EXECUTION_TIMEOUT = "execution_timeout"
REJECTED_REPETITIVE_HANDOFF = "repetitive_handoff"
REJECTED_NODE_CANCELLED = "node_cancelled"
ERROR_HANDOFF_TOOL = "handoff_tool_error"  # the handoff tool failed for a known agent (its error result)

# --- Microsoft Agent Framework -------------------------------------------------------------
# HandoffBuilder workflows (agent-framework-orchestrations): a handoff_to_<target> tool the
# orchestration intercepts; the target runs in the workflow's next superstep
FRAMEWORK_AGENT_FRAMEWORK = "agent-framework"
SPAN_DISPATCH = "agent_handoff.dispatch"
DISPATCH_DURATION = "agent_handoff.dispatch.duration"
PHASE_DISPATCH = "dispatch"  # the superstep boundary: checkpoint when configured, the deliveries

# --- Pipecat's multi-agent workers ----------------------------------------------------------
# activate_worker(target, deactivate_self=True) between pipecat.workers workers, on a WorkerBus
FRAMEWORK_PIPECAT_WORKERS = "pipecat-workers"
SPAN_BUS_CROSSING = "agent_handoff.bus_crossing"
SPAN_AWAIT_OLD_AUDIO = "agent_handoff.await_old_audio"
BUS_CROSSING_DURATION = "agent_handoff.bus_crossing.duration"
AWAIT_OLD_AUDIO_DURATION = "agent_handoff.await_old_audio.duration"
PHASE_BUS_CROSSING = "bus_crossing"  # the deactivation and activation sent, until the target takes it
PHASE_AWAIT_OLD_AUDIO = "await_old_audio"  # the new worker's first model call held while the old audio plays
# the worker had handed off already (it was inactive when it asked): its target is active beside the first's
FROM_INACTIVE = "agent_handoff.from_inactive"
REJECTED_SUPERSEDED = "superseded"  # a later request of the same tool batch replaced it; it never ran

# --- the phase registry: every phase of every framework ----------------------------------
# What a phase is to the handoff, which decides where its time shows:
ROLE_WORK = "work"  # counts in agent_handoff.duration; its duration attribute is on agent_handoff
ROLE_WAIT = "wait"  # only waiting (not in the duration); its duration attribute is on agent_handoff
ROLE_AFTER = "after"  # runs once the new agent is in (may outlast the handoff); attribute on its span
ROLE_NESTED = "nested"  # a detail inside another phase; attribute on its span
ROLE_LINKED = "linked"  # its own span in the same trace, linked to agent_handoff; attribute on it


@dataclass(frozen=True)
class PhaseSpec:
    """One phase: its span, the attribute that holds its seconds, and its role.

    ``framework_span`` names the framework's own span for the same work, where it sends one
    (LiveKit 1.8.2 and later, under its ``update_agent``): a handoff whose framework spans are
    under its ``agent_handoff`` does not send that phase's span again; its seconds go on
    ``agent_handoff`` (``duration_attribute``), and the waterfall draws it where that span ends.
    """

    name: str
    span: str
    duration_attribute: str
    role: str
    framework_span: str | None = None

    @property
    def on_handoff_span(self) -> bool:
        """Is its duration an attribute of ``agent_handoff`` (else of its own span)?"""
        return self.role in (ROLE_WORK, ROLE_WAIT)


# in display order: the order a handoff goes through them, whatever the framework
PHASE_REGISTRY: tuple[PhaseSpec, ...] = (
    PhaseSpec(PHASE_QUEUE_WAIT, SPAN_QUEUE_WAIT, QUEUE_WAIT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_LOOP_WAIT, SPAN_LOOP_WAIT, LOOP_WAIT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_LOCK_WAIT, SPAN_LOCK_WAIT, LOCK_WAIT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_HANDLER, SPAN_HANDLER, HANDLER_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_TOOL, SPAN_TOOL, TOOL_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_DELIVERY, SPAN_DELIVERY, DELIVERY_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_ON_HANDOFF, SPAN_ON_HANDOFF, ON_HANDOFF_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_HOOKS, SPAN_HOOKS, HOOKS_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_INPUT_FILTER, SPAN_INPUT_FILTER, INPUT_FILTER_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_SETTINGS, SPAN_SETTINGS, SETTINGS_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_FUNCTION_CALL_WAIT, SPAN_FUNCTION_CALL_WAIT, FUNCTION_CALL_WAIT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_TRANSFER_DELAY, SPAN_TRANSFER_DELAY, TRANSFER_DELAY_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_PREPARE, SPAN_PREPARE, PREPARE_DURATION, ROLE_WORK),
    PhaseSpec(DRAIN, SPAN_DRAIN, DRAIN_DURATION, ROLE_WORK, "drain_agent_activity"),
    PhaseSpec(PAUSE, SPAN_PAUSE, PAUSE_DURATION, ROLE_WORK, "pause_agent_activity"),
    PhaseSpec(CLOSE, SPAN_CLOSE, CLOSE_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_SWITCH, SPAN_SWITCH, SWITCH_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_PRE_ACTIONS, SPAN_PRE_ACTIONS, PRE_ACTIONS_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_SUMMARY, SPAN_SUMMARY, SUMMARY_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_CONTEXT_UPDATE, SPAN_CONTEXT_UPDATE, CONTEXT_UPDATE_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_DISPATCH, SPAN_DISPATCH, DISPATCH_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_BUS_CROSSING, SPAN_BUS_CROSSING, BUS_CROSSING_DURATION, ROLE_WORK),
    PhaseSpec(START, SPAN_START, START_DURATION, ROLE_WORK, "start_agent_activity"),
    PhaseSpec(RESUME, SPAN_RESUME, RESUME_DURATION, ROLE_WORK, "resume_agent_activity"),
    PhaseSpec(PHASE_REALTIME_UPDATE, SPAN_REALTIME_UPDATE, REALTIME_UPDATE_DURATION, ROLE_NESTED),
    PhaseSpec(PHASE_POST_ACTIONS, SPAN_POST_ACTIONS, POST_ACTIONS_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_SETUP, SPAN_SETUP, SETUP_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_CONNECT, SPAN_CONNECT, CONNECT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_SEND_HISTORY, SPAN_SEND_HISTORY, SEND_HISTORY_DURATION, ROLE_WORK),
    PhaseSpec(PHASE_REQUEST, SPAN_REQUEST, REQUEST_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_REMOTE_SETUP, SPAN_REMOTE_SETUP, REMOTE_SETUP_DURATION, ROLE_NESTED),
    PhaseSpec(PHASE_SESSION_UPDATE, SPAN_SESSION_UPDATE, SESSION_UPDATE_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_RESPONSE_DRAIN, SPAN_RESPONSE_DRAIN, RESPONSE_DRAIN_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_AWAIT_OLD_AUDIO, SPAN_AWAIT_OLD_AUDIO, AWAIT_OLD_AUDIO_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_FIRST_OUTPUT, SPAN_FIRST_OUTPUT, FIRST_OUTPUT_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_FIRST_AUDIO, SPAN_FIRST_AUDIO, FIRST_AUDIO_DURATION, ROLE_WAIT),
    PhaseSpec(PHASE_ON_ENTER, SPAN_ON_ENTER, ON_ENTER_DURATION, ROLE_AFTER, "on_enter"),
    PhaseSpec(PHASE_RECONNECT, SPAN_RECONNECT, RECONNECT_DURATION, ROLE_LINKED),
    PhaseSpec(PHASE_FIRST_SPEECH, SPAN_FIRST_SPEECH, FIRST_SPEECH_DELAY, ROLE_LINKED),
)
PHASES: dict[str, PhaseSpec] = {spec.name: spec for spec in PHASE_REGISTRY}
PHASES_BY_SPAN: dict[str, PhaseSpec] = {spec.span: spec for spec in PHASE_REGISTRY}
