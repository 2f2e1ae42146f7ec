"""Pure decisions over frozen values: memory, throughput and cost models, pool selection.

Nothing here performs I/O or imports kopf or the Kubernetes client.
"""
