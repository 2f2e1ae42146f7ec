"""The running engine, with no kopf: the observed cache (``cache``), the scheduling loop and its
pass (``scheduler``), the call pools (``calls``), the cost accountant (``accountant``), the
early-warning signals (``signals``), the admission webhook's review (``admission``) and which
watch events change anything (``changes``). The kopf handlers feed it events; the same engine can
run on a virtual clock with decisions applied to a simulated cluster."""
