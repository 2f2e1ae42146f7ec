"""The Kubernetes adapter: the only part of the operator (besides kopf wiring) that imports the
Kubernetes client. ``client``: the one client loader and error types; ``pools``: the pool
inventory behind the ``PoolSource`` port, with its fake."""
