"""Credentials out of every line we print or log.

Endpoints carry secrets where deployments put them: ``http://alice:<password>@collector:4317``,
``…/v1/traces?api_key=…``, and the exporters' own error text quotes them back. Our lines go to
application logs, CI logs and support tickets, so each is passed through :func:`redact` first:
the secret of a URL's userinfo (the user kept) and the values of query parameters that look
like keys become ``***``. It lives in core because core's setting reporter
(:mod:`otel_handoff.core.settings`) quotes values back too.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redact"]

MASK = "***"

# scheme://user:secret@  (and a bare user:secret@host, as gRPC targets and some errors show it)
_USERINFO = re.compile(
    r"(?P<head>(?:\b[a-zA-Z][a-zA-Z0-9+.-]*://)|(?<![\w/:@.%-]))"
    r"(?P<user>[^\s:/?#@'\"]*):(?P<secret>[^\s/?#@'\"]+)@(?=[\w\[])"
)
# ?api_key=… &token=… (case-insensitive), up to the next & # space or quote
_KEY_PARAMETER = re.compile(
    r"(?P<name>[?&;](?:[\w.-]*[_.-])?(?:api[_-]?key|apikey|key|token|access[_-]?token|sig|signature|"
    r"secret|password|passwd|pwd|auth|authorization|credential|credentials|code)=)"
    r"(?P<value>[^&#;\s'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every URL secret replaced by ``***``: userinfo secrets and key-like parameters."""
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:{MASK}@", text)
    if "=" in text:
        text = _KEY_PARAMETER.sub(lambda m: f"{m['name']}{MASK}", text)
    return text
