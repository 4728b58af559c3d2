"""Why a handoff did not reuse the STT pipeline or the realtime session.

The conditions are the framework's own, from `AgentActivity._detach_reusable_resources`,
evaluated the same way (including the release differences read by `_features`), but all
of them rather than stopping at the first, so a user sees every reason at once.
"""

from __future__ import annotations

import functools
from typing import Any

from ..core import schema as sc
from ._features import LiveKitFeatures


@functools.cache
def _default_stt_node() -> Any:
    from livekit.agents import Agent  # on first use: importing us must not import livekit

    return Agent.stt_node


def stt_blockers(old: Any, new: Any, features: LiveKitFeatures) -> list[str]:
    reasons = []
    if not old._audio_recognition:
        reasons.append(sc.BLOCKED_NO_AUDIO_INPUT)
    old_stt = old.stt  # a property that resolves the model: read once
    if old_stt is None:
        reasons.append(sc.BLOCKED_NO_STT)
    old_node, new_node = type(old.agent).stt_node, type(new.agent).stt_node
    if features.stt_reuse_needs_default_node:
        default = _default_stt_node()
        custom_node = old_node is not default or new_node is not default
    else:  # 1.5.3 to 1.5.x: both agents only had to share the same stt_node
        custom_node = old_node is not new_node
    if custom_node:
        reasons.append(sc.BLOCKED_STT_NODE)
    if old_stt is not None and old_stt is not new.stt:
        reasons.append(sc.BLOCKED_STT_INSTANCE)
    return reasons


def realtime_blockers(old: Any, new: Any, features: LiveKitFeatures) -> list[str]:
    if old._rt_session is None:
        return [sc.BLOCKED_NO_REALTIME_SESSION]
    from livekit.agents import llm

    if not isinstance(old.llm, llm.RealtimeModel):
        return [sc.BLOCKED_NO_REALTIME_SESSION]
    if old.llm is not new.llm:
        return [sc.BLOCKED_MODEL]
    capabilities = old.llm.capabilities
    reasons = []
    if not capabilities.mutable_chat_context:
        options = {"exclude_instructions": True, "exclude_handoff": True, "exclude_config_update": True}
        current = old._rt_session.chat_ctx.copy(**options)
        # 2.0 keeps the history on the activity; its agent's `chat_ctx` raises outside its hooks
        history = new._chat_ctx if features.realtime_reuse_history == "activity" else new.agent.chat_ctx
        if not current.is_equivalent(history.copy(**options)):
            reasons.append(sc.BLOCKED_CHAT_CTX)
    if not capabilities.mutable_instructions and old.agent.instructions != new.agent.instructions:
        reasons.append(sc.BLOCKED_INSTRUCTIONS)
    if not capabilities.mutable_tools and llm.ToolContext(old.tools) != llm.ToolContext(new.tools):
        reasons.append(sc.BLOCKED_TOOLS)
    if (
        features.realtime_reuse_checks_turn_detection
        and old._rt_turn_detection_enabled != new._rt_turn_detection_enabled
    ):
        reasons.append(sc.BLOCKED_TURN_DETECTION)
    return reasons
