"""The Kubernetes adapter: the only part of the operator (besides kopf wiring) that imports the
Kubernetes client. ``client`` is the one client loader with its error types; the other modules
are ports with their real and fake implementations (job status and events, workloads, cost
writes, leases, taints and annotations, the webhook certificate) and readers that turn wire
objects into the snapshot's views."""
