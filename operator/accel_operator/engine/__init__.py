"""The running engine, with no kopf: the observed cache (``cache``), the plan cache (``plans``), one
pass as a pure function (``schedule``), the writes (``apply``), the loop with its Lease check
(``loop``), the clock port (``clock``), the ``scheduler`` facade the handlers talk to, the call
pools (``calls``), the cost accountant (``accountant``), the early-warning signals (``signals``),
the admission webhook's review (``admission``) and which watch events change anything
(``changes``). The kopf handlers feed it events; the same engine can run on a virtual clock with
decisions applied to a simulated cluster."""
