"""Test-wide settings. Under CI (CI=true) Hypothesis is derandomized, so a property test
fails the same way on every run of the same commit; locally it keeps exploring new examples."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
