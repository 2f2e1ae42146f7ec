"""Ports to the outside world (Kubernetes, AWS, GCP TPU, clock) as Protocols, with fakes."""
