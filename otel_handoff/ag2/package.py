"""What the AG2 instrumentor instruments, in the opentelemetry-python-contrib manner.

Two distributions install the classic ``autogen`` import package: ``ag2`` (0.9.10 to 0.14) and
``autogen`` (0.14, a re-publication of the same code). Either one will do, as with
psycopg2 / psycopg2-binary; ``ag2`` 1.0 and later no longer ship ``autogen``.
"""

_instruments_ag2 = "ag2 >= 0.9.10, < 1"  # tested: 0.9.10 and 0.14.0 (the last 0.x)
_instruments_autogen = "autogen >= 0.14, < 1"

_instruments = ()
_instruments_any = (_instruments_ag2, _instruments_autogen)

_supports_metrics = True
