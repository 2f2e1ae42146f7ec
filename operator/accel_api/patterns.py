"""Regular expressions the models enforce, each with the sentence shown when a value breaks it."""

from typing import Any, Final

# The parts the patterns below are made of (one spelling each).
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"  # a DNS label
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"  # dot-separated DNS labels
_BUCKET = r"[a-z0-9]([-.a-z0-9]{0,61}[a-z0-9])?"  # an S3 bucket name
_PATH = r"(/[^\x00-\x1f\x7f\\]*)?"  # a path: no control characters or backslashes
_DOT_SEGMENT = r"(\.|\.\.|%2[eE]|%2[eE]%2[eE]|\.%2[eE]|%2[eE]\.)"  # "." or "..", also percent-encoded
_ANY_SCHEME_PATH = r"^[a-z0-9]+://[^/]*(/[^/]*)*/"

DNS_LABEL: Final = rf"^{_LABEL}$"
# An object name (pools, nodes): dot-separated DNS labels (RFC 1123 subdomain).
DNS_SUBDOMAIN: Final = rf"^{_SUBDOMAIN}$"
# Kubernetes label values (also taint values): empty, or alphanumerics with '-', '_', '.' inside.
LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Kubernetes label keys: an optional DNS-subdomain prefix and "/", then a name as a label value.
LABEL_KEY: Final = rf"^({_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
# A policy's team or pool list: a name, or * for all.
TEAM_OR_ANY: Final = rf"^(\*|{_LABEL})$"
POOL_OR_ANY: Final = rf"^(\*|{_SUBDOMAIN})$"
DURATION: Final = r"^([0-9]+(\.[0-9]+)?(d|h|m|s))+$"
# The bucket follows S3's naming rules; the claim is a DNS label; the path has no control
# characters or backslashes (``..``/``.``/empty segments are refused by CHECKPOINT_ESCAPE).
CHECKPOINT_URI: Final = rf"^(s3://{_BUCKET}|pvc://{_LABEL}){_PATH}$"
# A checkpoint path that would leave its prefix or claim once normalised: a "." or ".." segment
# (also percent-encoded) or an empty segment ("a//b"). A single trailing "/" is allowed.
CHECKPOINT_ESCAPE: Final = rf"{_ANY_SCHEME_PATH}{_DOT_SEGMENT}?(/|$)"
# A policy's checkpoint prefix: an S3 bucket, optionally a path (a trailing "/" allowed: the
# prefix is a directory either way, matched segment by segment).
CHECKPOINT_PREFIX: Final = rf"^s3://{_BUCKET}{_PATH}$"
# A prefix that would not say which directory it is: a "." or ".." segment (also percent-encoded)
# or an empty segment anywhere but a single trailing "/" ("s3://b/a//", "s3://b//a").
CHECKPOINT_PREFIX_ESCAPE: Final = rf"{_ANY_SCHEME_PATH}({_DOT_SEGMENT}(/|$)|/)"
# A duration that adds up to nothing ("0s", "0h0m"): refused by the CRD beside DURATION.
ZERO_DURATION: Final = r"^(0+(\.0+)?(d|h|m|s))+$"
ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# A name a policy reserves: an environment variable name, or a prefix of one ending in *.
RESERVED_ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*\*?$"
TPU_TOPOLOGY: Final = r"^[1-9][0-9]{0,3}(x[1-9][0-9]{0,3}){1,2}$"  # every dimension 1..9999

EXPLAINED: Final[dict[str, str]] = {
    DNS_LABEL: "must be a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters), e.g. research",
    LABEL_VALUE: "must be a Kubernetes label value (letters, digits, '-', '_', '.'; starting and ending "
    "with a letter or digit), e.g. p4d.24xlarge",
    LABEL_KEY: "must be a Kubernetes label key such as node.kubernetes.io/instance-type",
    DNS_SUBDOMAIN: "must be a lowercase DNS name (a-z, 0-9, '-' and '.'), e.g. h100-spot",
    TEAM_OR_ANY: "must be a team name (a lowercase DNS label, e.g. research) or *",
    POOL_OR_ANY: "must be an AcceleratorPool name (a lowercase DNS name, e.g. h100-spot) or *",
    RESERVED_ENV_NAME: "must be an environment variable name, or a prefix ending in * (e.g. MY_SECRET or MY_*)",
    DURATION: "must be a duration such as 90m, 36h, 2d or 1h30m",
    CHECKPOINT_URI: "must be s3://bucket/prefix or pvc://claim/path (no control characters or backslashes)",
    CHECKPOINT_PREFIX: "must be s3://bucket/ or s3://bucket/path/ (no control characters or backslashes)",
    ENV_NAME: "must be an environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)",
    TPU_TOPOLOGY: "must be a TPU topology such as 2x4 or 4x4x4 (every dimension 1 to 9999)",
}


def refused_in_crd(pattern: str, message: str) -> dict[str, Any]:
    """``json_schema_extra`` for a string field whose values matching ``pattern`` the CRD refuses:
    a CEL rule on the field itself, so the API server names the field and says why
    (``spec.deadline: Invalid value: "string": must be more than 0s``). A schema ``not: {pattern}``
    would refuse the same values, reported as ``<nil>: Invalid value: "": "spec.deadline" must not
    validate the schema (not)``: no field, no reason."""
    if "'" in pattern:
        raise ValueError(f"a pattern for a CEL raw string has no quote: {pattern}")
    return {"x-kubernetes-validations": [{"rule": f"!self.matches(r'{pattern}')", "message": message}]}


_UNIT_SECONDS: Final = "(c.endsWith('d') ? 86400.0 : (c.endsWith('h') ? 3600.0 : (c.endsWith('m') ? 60.0 : 1.0)))"


def duration_at_most(seconds: int, message: str) -> dict[str, Any]:
    """A CEL rule for a DURATION field: its parts (``2d12h`` is 2d and 12h) summed as seconds,
    at most ``seconds``. The API server's own ``duration()`` knows no days, hence the sum by hand
    (``findAll`` and ``sum`` are in the API server's CEL libraries); the field's maxLength keeps it cheap."""
    parts = r"self.findAll(r'[0-9]+(\.[0-9]+)?[dhms]')"
    rule = f"{parts}.map(c, double(c.substring(0, size(c) - 1)) * {_UNIT_SECONDS}).sum() <= {float(seconds)}"
    return {"rule": rule, "message": message}
