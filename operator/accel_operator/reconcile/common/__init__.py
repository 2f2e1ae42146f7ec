"""The floor the reconcile rooms and the accountant share: the frozen snapshot and its views,
``Decision``/``Cond``, the typed actions and workload names, checkpoints, node capacity."""
