"""Pure decisions over frozen values: memory, throughput and cost models, pool selection.

Nothing here performs I/O or imports kopf or the Kubernetes client. Import the modules qualified:

- ``profile.from_spec(spec) -> JobProfile``: the job as the estimators read it.
- ``memory.estimate(profile, accelerator, layout)``, ``throughput.estimate(...)``: one placement.
- ``cost.estimate(...)``: dollars and wall time with spot preemptions priced in.
- ``selection.plan(spec, pools, catalog) -> Plan``: where a job runs, every alternative and why
  it lost (types in ``candidates``, sentences in ``explain``); with ``index=`` (an
  ``eligible.PoolIndex`` of the pools) only the pools the job's placement filters leave it.
- ``cache.PlanCache``: what planning remembers between calls (keyed on values), owned by the
  caller and passed as ``cache=``; nothing is kept in module state.

The hardware facts come from ``accel_api.catalog``. The memory and throughput models follow what
Hugging Face transformers models do in eager PyTorch (see ``blocks``); bench/plan_accuracy.py
compares them with real H100 runs. Serialising a plan (the job's ``status.plan``, ``accelctl plan
-o json``) happens where it is written: ``reconcile.status`` and ``cli.render``.
"""
