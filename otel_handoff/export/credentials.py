"""Credentials: out of every line we print or log, and sent where a URL carries them.

Endpoints carry secrets where deployments put them: ``http://alice:<password>@collector:4317``,
``…/v1/traces?api_key=…``, and the exporters' own error text quotes them back. Our lines go to
application logs, CI logs and support tickets, so each is passed through :func:`redact` first
(:mod:`otel_handoff.core.redaction`, which core's setting reporter uses too): the secret of a URL's
userinfo (the user kept) and the values of query parameters that look like keys become ``***``.
Header values (``OTEL_EXPORTER_OTLP_HEADERS``) are never printed at all.
A URL's userinfo is sent the way HTTP clients send it (basic auth), not left to urllib, which
takes it for part of the host name.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit

from ..core.redaction import MASK, redact

__all__ = ["MASK", "redact", "split_userinfo"]


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its userinfo, and the ``Authorization: Basic`` header that carries it."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    netloc = parts.netloc.rpartition("@")[2]
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return parts._replace(netloc=netloc).geturl(), {
        "Authorization": f"Basic {base64.b64encode(pair).decode()}"
    }
