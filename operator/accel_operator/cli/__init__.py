"""``accelctl``: the command-line front end (validate, crds, plan, cluster, ...)."""
