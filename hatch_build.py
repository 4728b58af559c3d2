"""Puts the auto-instrumentation start-up hook (a .pth file) in editable installs too.

Regular wheels get it through `force-include` in pyproject.toml; hatchling leaves that out of
editable wheels, where a build hook has to add it.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH = "otel_handoff_auto.pth"


class AutoInstrumentHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            build_data.setdefault("force_include_editable", {})[PTH] = PTH
