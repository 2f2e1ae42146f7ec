"""What the AWS adapters raise when AWS cannot answer (the caller retries later)."""

from accel_operator.adapters.errors import Unavailable


class CloudUnavailable(Unavailable):
    """An AWS call failed for a reason other than a definite answer (network, throttling, 5xx,
    permissions): try again later; nothing was decided."""
