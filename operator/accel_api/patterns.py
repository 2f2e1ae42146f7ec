"""Regular expressions the models enforce, each with the sentence shown when a value breaks it."""

from typing import Final

DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DURATION: Final = r"^([0-9]+(\.[0-9]+)?(d|h|m|s))+$"
CHECKPOINT_URI: Final = r"^(s3://[^/]+(/.*)?|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?)$"
ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
TPU_TOPOLOGY: Final = r"^[0-9]+(x[0-9]+){1,2}$"

EXPLAINED: Final[dict[str, str]] = {
    DNS_LABEL: "must be a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters), e.g. research",
    DURATION: "must be a duration such as 90m, 36h, 2d or 1h30m",
    CHECKPOINT_URI: "must be s3://bucket/prefix or pvc://claim/path",
    ENV_NAME: "must be an environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)",
    TPU_TOPOLOGY: "must be a TPU topology such as 2x4 or 4x4x4",
}
