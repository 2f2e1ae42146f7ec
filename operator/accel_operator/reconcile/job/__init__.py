"""A job's lifecycle as pure decisions: ``decide(job, snapshot, now)`` and its parts (admission,
retries, resume, spot fallback, the bind clock, the policy gate, the status patch)."""
