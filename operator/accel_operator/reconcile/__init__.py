"""Pure reconcile decisions: what a job's status and the cluster should become, as values.

No I/O and no kopf: the handlers observe, call these functions and apply what they return.
"""
