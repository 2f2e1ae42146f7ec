"""``accelctl simulate``: replay a trace of jobs through the real engine on a virtual clock.

:mod:`.trace` reads and validates the trace (JSON lines) and the pools file; :mod:`.replay` runs
the engine (``Scheduler.step`` through the adapters' fakes, the accountant's ledger) over a
simulated cluster; :mod:`.figures` turns a replay into the figures a platform team compares;
:mod:`.generate` writes synthetic traces shaped after published GPU-cluster studies.
"""
