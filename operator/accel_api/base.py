"""Shared pydantic configuration: camelCase in YAML, unknown fields rejected, values frozen.

Every CRD model inherits from :class:`ApiModel`, so the wire names, strictness and the JSON
schema the CRDs are generated from are decided in one place.
"""

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from accel_api import bounds


class ApiModel(BaseModel):
    """Base of every spec/status value: camelCase aliases, no unknown fields, immutable.

    Only finite numbers: NaN and ±infinity are refused everywhere (they cannot be stored by the
    API server and poison every estimate derived from them).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        validate_default=True,
        allow_inf_nan=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """The value as Kubernetes stores it: camelCase keys, no unset optionals, enums as text."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(BaseModel):
    """The parts of Kubernetes ObjectMeta the product reads; the rest is kept, not validated."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    name: str | None = Field(default=None, max_length=bounds.DNS_SUBDOMAIN_LENGTH)
    namespace: str | None = Field(default=None, max_length=bounds.DNS_LABEL_LENGTH)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None


class Condition(ApiModel):
    """A Kubernetes-style condition (``type``/``status``/``reason``/``message``)."""

    type: str = Field(min_length=1, max_length=bounds.LABEL_KEY_LENGTH)
    status: str = Field(pattern=r"^(True|False|Unknown)$", max_length=7)
    reason: bounds.Message | None = None
    message: bounds.Message | None = None
    last_transition_time: bounds.Time | None = None
    observed_generation: bounds.Generation | None = None


# A status list of conditions: the first CONDITIONS_ITEMS are kept.
Conditions = Annotated[
    list[Condition],
    BeforeValidator(bounds.keep_first(bounds.CONDITIONS_ITEMS)),
    Field(max_length=bounds.CONDITIONS_ITEMS),
]
