"""Regular expressions the models enforce, each with the sentence shown when a value breaks it."""

from typing import Any, Final

DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DURATION: Final = r"^([0-9]+(\.[0-9]+)?(d|h|m|s))+$"
# The bucket follows S3's naming rules; the claim is a DNS label; the path has no control
# characters or backslashes (``..``/``.``/empty segments are refused by CHECKPOINT_ESCAPE).
CHECKPOINT_URI: Final = (
    r"^(s3://[a-z0-9]([-.a-z0-9]{0,61}[a-z0-9])?|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?)(/[^\x00-\x1f\x7f\\]*)?$"
)
# A checkpoint path that would leave its prefix or claim once normalised: a "." or ".." segment
# (also percent-encoded) or an empty segment ("a//b"). A single trailing "/" is allowed.
CHECKPOINT_ESCAPE: Final = r"^[a-z0-9]+://[^/]*(/[^/]*)*/(\.|\.\.|%2[eE]|%2[eE]%2[eE]|\.%2[eE]|%2[eE]\.)?(/|$)"
# A duration that adds up to nothing ("0s", "0h0m"): refused by the CRD beside DURATION.
ZERO_DURATION: Final = r"^(0+(\.0+)?(d|h|m|s))+$"
ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
TPU_TOPOLOGY: Final = r"^[1-9][0-9]{0,3}(x[1-9][0-9]{0,3}){1,2}$"  # every dimension 1..9999

EXPLAINED: Final[dict[str, str]] = {
    DNS_LABEL: "must be a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters), e.g. research",
    DURATION: "must be a duration such as 90m, 36h, 2d or 1h30m",
    CHECKPOINT_URI: "must be s3://bucket/prefix or pvc://claim/path (no control characters or backslashes)",
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
