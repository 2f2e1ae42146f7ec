"""accel_operator: the operator that places, runs and accounts accelerator jobs.

Packages, imports pointing downward only (checked by import-linter, ``.importlinter``):
``app`` (the process) → ``cli`` | ``handlers`` (kopf wiring) → ``engine`` (scheduler, cache,
accountant; no kopf) → ``context`` (what one process shares) → ``adapters`` (Kubernetes, clouds,
clock) → ``reconcile.job`` | ``reconcile.nodes`` | ``accounting`` (pure decisions, independent of
each other) → ``reconcile.common`` (their shared floor) → ``planning`` (pure estimates and
selection) → ``accel_api`` (models).
"""
