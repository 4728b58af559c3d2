"""``python -m otel_handoff``: the ``otel-handoff`` command."""

import sys

from .cli import main

sys.exit(main())
