"""The running engine, with no kopf: the observed cache (``cache``), the scheduling loop and its
pass (``scheduler``), the call pools (``calls``), the cost accountant (``accountant``) and the
early-warning signals (``signals``). The kopf handlers feed it events; the same engine can run on
a virtual clock with decisions applied to a simulated cluster."""
