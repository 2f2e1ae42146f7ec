"""What nodes say about the jobs on them, as pure decisions: device health and hung jobs
(``health``), idle reservations stopped by policy (``idle_stop``), consolidation of fragmented
pools (``consolidate``) and the early warnings of a node about to go (``early_warning``)."""
