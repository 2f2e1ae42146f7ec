"""Pure decisions over frozen values: memory, throughput and cost models, pool selection.

Nothing here performs I/O or imports kopf or the Kubernetes client; the one file it reads is the
accelerator catalog (``catalog.yaml``, cached). Import the modules qualified:

- ``select.plan(spec, pools, catalog) -> Plan``: where a job runs, every alternative and why it
  lost; ``Plan.to_status()`` is the job's ``status.plan``, ``Plan.to_json()`` the CLI's contract.
- ``memory.estimate(job, accelerator, layout)``, ``throughput.estimate(...)``: one placement.
- ``cost.estimate(...)``: dollars and wall time with spot preemptions priced in.
- ``catalog.load(path=None)``: the shipped catalog, optionally overridden by a user file.

The models follow what Hugging Face transformers models do in eager PyTorch (see ``layers``);
bench/plan_accuracy.py compares them with real H100 runs.
"""
