"""Shared pydantic configuration: camelCase in YAML, unknown fields rejected, values frozen.

Every CRD model inherits from :class:`ApiModel`, so the wire names, strictness and the JSON
schema the CRDs are generated from are decided in one place.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from accel_api import bounds, vocabulary


@dataclass(frozen=True)
class CelRule:
    """A rule across the fields of one object, declared once: ``cel`` is what the API server runs
    (``x-kubernetes-validations`` on the model's schema node, so it refuses a breach even with the
    webhook down), ``check`` the same rule in Python (run after the fields validate).

    ``cel`` sees the object as stored: fields the user left out are absent (the CRDs carry no
    defaults), so guard each optional or defaulted field with ``has(self.x)``. Keep rules on
    scalars (cheap under the API server's CEL cost limits); a rule over a list must rely on the
    list's ``maxItems`` and its strings' ``maxLength``.
    """

    name: str  # kebab-case id, e.g. max-devices-at-least-min
    cel: str
    message: str  # the API server's message, and the start of the Python one
    check: Callable[[Any], bool]  # True when the model value obeys the rule
    field_path: str | None = None  # where the API server points, e.g. ".maxDevices"
    got: Callable[[Any], str] | None = None  # the values that matter, for the Python message

    def wire(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out

    def problem(self, value: Any) -> str | None:
        """The Python message when ``value`` breaks the rule, else None."""
        if self.check(value):
            return None
        return self.message + (f" (got {self.got(value)})" if self.got else "")


# The names of the fields set on a model, one set object per distinct combination (see
# ApiModel._share_fields_set). Bounded: past the limit a model keeps its own set.
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
FIELDS_SETS_LIMIT = 4_096


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

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()
    """Rules across this model's fields: CEL in the CRD and the same check here (:class:`CelRule`)."""

    @model_validator(mode="after")
    def _cel_rules(self) -> Self:
        problems = [p for rule in type(self).cel_rules if (p := rule.problem(self)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        self._share_fields_set()
        return self

    def _share_fields_set(self) -> None:
        """Hold the set of the fields set (pydantic's ``__pydantic_fields_set__``, one per model:
        216 to 728 bytes, more than many a model's values) as the one object shared by every
        model with the same names set. The models are frozen and pydantic copies the set before
        it changes one (``model_copy``), so no reader can tell; at fleet size the sets were a
        fifth of the engine's bytes (the specs, statuses and ledgers of 100,000 jobs: docs/scale.md)."""
        own = self.__pydantic_fields_set__
        key = frozenset(own)
        shared = _FIELDS_SETS.get(key)
        if shared is None:
            if len(_FIELDS_SETS) >= FIELDS_SETS_LIMIT:
                return
            shared = _FIELDS_SETS[key] = set(key)
        object.__setattr__(self, "__pydantic_fields_set__", shared)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy (its own set of fields set, changed by ``update``), then that set shared."""
        copied = super().model_copy(update=update, deep=deep)
        copied._share_fields_set()
        return copied

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = super().__get_pydantic_json_schema__(core_schema, handler)
        rules = cls.__dict__.get("cel_rules", ())
        if rules:
            handler.resolve_ref_schema(schema)["x-kubernetes-validations"] = [r.wire() for r in rules]
        return schema

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


SpecT = TypeVar("SpecT", bound=ApiModel)
StatusT = TypeVar("StatusT", bound=ApiModel)


class Resource(ApiModel, Generic[SpecT, StatusT]):
    """What every object of the API carries: its group version, its kind (each kind narrows it to
    its own name), metadata, a spec and, once the operator or the agent writes one, a status."""

    api_version: Literal["accel.dev/v1alpha1"] = vocabulary.API_VERSION  # type: ignore[assignment]
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecT
    status: StatusT | None = None


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
