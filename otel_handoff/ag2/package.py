"""What the AG2 instrumentor instruments, in the opentelemetry-python-contrib manner.

Two AG2 frameworks, either or both installed:

- the classic ``autogen`` import package (group chats), shipped by ``ag2`` 0.9.10 to 0.14 and
  by the ``autogen`` distribution (0.14, a re-publication of the same code);
- ``ag2`` 1.0 and later: ``ag2.network`` workflow channels (no ``autogen`` package any more).

Either distribution will do (psycopg2 / psycopg2-binary style). Lower bounds only: a newer,
untested release is instrumented when every wrap point is where we expect it.
"""

_instruments_ag2 = "ag2 >= 0.9.10"
_instruments_autogen = "autogen >= 0.14"

_instruments = ()
_instruments_any = (_instruments_ag2, _instruments_autogen)

# what the version matrix (.ci/matrix.sh) passes; newer releases get one info line
TESTED_CLASSIC = "ag2 0.9.10 to 0.14.0, autogen 0.14.1"
TESTED_NETWORK = "ag2 1.0.0 to 1.2.1"
NEWEST_TESTED_CLASSIC = "0.14.1"
NEWEST_TESTED_NETWORK = "1.2.1"

_supports_metrics = True
