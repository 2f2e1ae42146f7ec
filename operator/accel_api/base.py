"""Shared pydantic configuration: camelCase in YAML, unknown fields rejected, values frozen.

Every CRD model inherits from :class:`ApiModel`, so the wire names, strictness and the JSON
schema the CRDs are generated from are decided in one place.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every spec/status value: camelCase aliases, no unknown fields, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The value as Kubernetes stores it: camelCase keys, no unset optionals, enums as text."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(BaseModel):
    """The parts of Kubernetes ObjectMeta the product reads; the rest is kept, not validated."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None


class Condition(ApiModel):
    """A Kubernetes-style condition (``type``/``status``/``reason``/``message``)."""

    type: str = Field(min_length=1)
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None
