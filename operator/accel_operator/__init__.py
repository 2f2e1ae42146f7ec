"""accel_operator: the operator that places, runs and accounts accelerator jobs.

Layers, imports pointing downward only (checked by import-linter):
``handlers`` (kopf entry points) → ``adapters`` (Kubernetes, clouds, clock) → ``planning`` (pure
decisions) → ``accel_api`` (models). ``cli`` is a front end beside the handlers.
"""
