"""``python -m accel_agent``: see :mod:`accel_agent.cli`."""

import sys

from accel_agent.cli import main

sys.exit(main())
