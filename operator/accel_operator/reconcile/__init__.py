"""Pure reconcile decisions, in three rooms over one shared floor (no I/O, no kopf):

- ``job``: a job's lifecycle (``decide``: admit, run, fail, retry, resume, fall back, stop);
- ``nodes``: what node reports and node signals add (health moves, idle stops, consolidation,
  early warnings);
- ``common``: what the rooms share: the frozen snapshot, ``Decision`` and ``Cond``, the typed
  actions, checkpoints and node capacity.

Accounting (the ledger, the rollup, team spend, the report rows) is the third room, beside this
package: ``accel_operator.accounting``. The rooms never import each other (import-linter).
"""
