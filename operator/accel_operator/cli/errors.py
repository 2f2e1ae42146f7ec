"""The CLI's own error: a problem with what the user asked for (file missing, bad flags).

It lives apart from ``cli.main`` so that ``python -m accel_operator.cli.main`` (which loads
``main`` a second time as ``__main__``) still catches the same class the subcommands raise.
"""


class UsageError(Exception):
    """Printed as ``error: <message>`` with exit status 2."""


class RuntimeFailure(Exception):
    """Printed as ``error: <message>`` with exit status 1: what was asked is fine, but it could
    not be done now (the cluster unreachable, the job not found, a write refused)."""
