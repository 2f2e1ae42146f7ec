"""kopf entry points: parse the body into a model, observe, decide, apply, write status."""
