"""Test-wide settings. Under CI (CI=true) Hypothesis is derandomized, so a property test
fails the same way on every run of the same commit; locally it keeps exploring new examples.
The operator's re-plan interval is shortened before any test imports the handlers."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

# The operator re-plans waiting jobs this often (seconds); short, so tests see pools change.
os.environ.setdefault("ACCEL_OPERATOR_REPLAN_SECONDS", "2")
