"""The accelerator catalog: what each accelerator id is (memory, peak rates, links, prices).

The one definition of hardware facts for everyone: the planner sizes jobs with it, the node
agent's simulated and fake backends take device memory from it, and the local cluster labels its
simulated nodes from it. It ships as ``catalog.yaml`` beside this module; a user file may
override fields of known ids or add new ids (``load(path)``). The result is cached and every
value is frozen.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_type_hints

import yaml
from pydantic.alias_generators import to_camel

from accel_api import bounds, loader
from accel_api.enums import AcceleratorKind


class CatalogError(ValueError):
    """A catalog file that cannot be used; the message names the field path."""


@dataclass(frozen=True, slots=True)
class ListPrice:
    """List prices per device-hour with their dates and sources.

    as_of/source date and name the on-demand figure; spot_as_of/spot_source the spot figure
    (the same as the on-demand ones where the catalog entry gives no spotAsOf/spotSource).
    """

    on_demand_per_device_hour: float
    spot_per_device_hour: float
    as_of: str
    source: str
    spot_as_of: str
    spot_source: str


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator model, per device. Rates in bytes/s and FLOP/s, sizes in bytes."""

    id: str
    kind: AcceleratorKind
    product: str
    memory_bytes: int
    bf16_flops: float
    fp32_flops: float
    hbm_bytes_per_second: float
    intra_node_bytes_per_second: float
    inter_node_bytes_per_second: float
    devices_per_node: int
    compute_units: int
    mfu: float
    attention_efficiency: float
    bandwidth_efficiency: float
    unaligned_matmul_efficiency: float
    kernel_seconds: float
    host_seconds_per_op: float
    context_bytes: int
    workspace_bytes: int
    price: ListPrice
    # Other names of the same part (the GKE label of a single-host TPU type, say), casefolded.
    aliases: tuple[str, ...] = ()
    # Whether the part runs FP8 matrix products on tensor cores (Hopper, Blackwell) and has bf16
    # arithmetic at all (Turing has not: autocast and bf16 weights fall back to emulation or fail).
    fp8_tensor_cores: bool = False
    bf16: bool = True

    def __hash__(self) -> int:
        # Cheap and consistent with equality (equal accelerators share an id); the models'
        # caches hash accelerators on every call.
        return hash(self.id)

    def flops(self, compute_bytes: int) -> float:
        """Dense peak for matrix products whose operands have ``compute_bytes`` per element."""
        return self.fp32_flops if compute_bytes >= 4 else self.bf16_flops


@dataclass(frozen=True, slots=True)
class Catalog:
    accelerators: Mapping[str, Accelerator]
    source: str

    def get(self, accelerator_id: str) -> Accelerator | None:
        return self.accelerators.get(accelerator_id)

    def __contains__(self, accelerator_id: object) -> bool:
        return accelerator_id in self.accelerators

    def __iter__(self) -> Iterator[Accelerator]:
        return iter(self.accelerators.values())

    def ids(self) -> tuple[str, ...]:
        return tuple(self.accelerators)

    def by_product(self, product: str | None) -> Accelerator | None:
        """The accelerator a node label or NVML name names: ``nvidia.com/gpu.product``
        (``NVIDIA-H100-80GB-HBM3``), the NVML name (``NVIDIA H100 80GB HBM3``), the GKE TPU
        accelerator label (``tpu-v5-lite-podslice``) or one of an entry's ``aliases``."""
        if not product:
            return None
        want = product.replace(" ", "-").casefold()
        for accel in self.accelerators.values():
            if want == accel.product.casefold() or want in accel.aliases:
                return accel
        return None


def _wire_table(cls: type, *, skip: frozenset[str] = frozenset()) -> Mapping[str, tuple[str, type]]:
    """YAML (camelCase) name → (dataclass field, the type its value is read as), from the
    dataclass itself: a field added there is read from the file without a second list to edit.
    An enum field is read as text (``_accelerator`` converts it)."""
    hints = get_type_hints(cls)
    table: dict[str, tuple[str, type]] = {}
    for f in fields(cls):
        if f.name in skip:
            continue
        kind = hints[f.name]
        kind = str if isinstance(kind, type) and issubclass(kind, StrEnum) else kind
        if kind not in (str, bool, int, float):  # what _value reads; anything else is read apart
            raise TypeError(f"{cls.__name__}.{f.name}: {kind} is no scalar the catalog reads; skip it here")
        table[to_camel(f.name)] = (f.name, kind)
    return MappingProxyType(table)


# The scalar fields of an accelerator (the price and the aliases are read apart).
_SCALARS = _wire_table(Accelerator, skip=frozenset({"id", "price", "aliases"}))
# Flags a new accelerator may leave out (the dataclass's defaults apply).
_OPTIONAL = frozenset({"fp8TensorCores", "bf16"})
_PRICE = _wire_table(ListPrice)
# The date or source of a figure a user catalog overrides without giving them.
_NOT_GIVEN = "not given (user catalog)"
# Price fields an entry may leave out: the spot figure's date and source default to the
# on-demand ones given with it.
_PRICE_OPTIONAL = frozenset({"spotAsOf", "spotSource"})
_FRACTIONS = ("mfu", "attentionEfficiency", "bandwidthEfficiency", "unalignedMatmulEfficiency")
# Upper bounds, so every estimate stays finite: 1e18 for rates and sizes (a device has ~1e15
# FLOP/s and ~1e11 bytes) unless listed here.
_MAXIMA: Mapping[str, float] = MappingProxyType(
    {
        "devicesPerNode": bounds.DEVICES_PER_NODE,
        "kernelSeconds": 1.0,
        "hostSecondsPerOp": 1.0,
        "onDemandPerDeviceHour": bounds.PRICE_MAX,
        "spotPerDeviceHour": bounds.PRICE_MAX,
    }
)


def _value(raw: Any, kind: type, path: str) -> Any:
    if kind is str:
        if not isinstance(raw, str) or not raw:
            raise CatalogError(f"{path}: must be a non-empty string (got {raw!r})")
        return raw
    if kind is bool:
        if not isinstance(raw, bool):
            raise CatalogError(f"{path}: must be true or false (got {raw!r})")
        return raw
    if isinstance(raw, str):
        # YAML 1.1 reads 1.5e12 (no exponent sign) as text; accept any numeric text.
        try:
            raw = float(raw)
        except ValueError:
            raise CatalogError(f"{path}: must be a number (got {raw!r})") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise CatalogError(f"{path}: must be a number (got {raw!r})")
    if not math.isfinite(raw):
        raise CatalogError(f"{path}: must be a finite number (got {raw!r})")
    if raw < 0:
        raise CatalogError(f"{path}: must be >= 0 (got {raw!r})")
    limit = _MAXIMA.get(path.rsplit(".", 1)[-1], 1e18)
    if raw > limit:
        raise CatalogError(f"{path}: must be <= {limit:g} (got {raw!r})")
    if kind is int:
        if float(raw) != int(raw):
            raise CatalogError(f"{path}: must be a whole number (got {raw!r})")
        return int(raw)
    return float(raw)


def _fields(raw: Mapping[str, Any], table: Mapping[str, tuple[str, type]], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in table:
            known = ", ".join(sorted(table))
            raise CatalogError(f"{path}.{key}: unknown field. Known fields: {known}.")
        name, kind = table[key]
        out[name] = _value(value, kind, f"{path}.{key}")
    return out


def _accelerator(acc_id: str, raw: Any, base: Accelerator | None, path: str) -> Accelerator:
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{path}: must be a mapping of fields")
    raw = dict(raw)
    price_raw = raw.pop("price", None)
    aliases_raw = raw.pop("aliases", None)
    values = _fields(raw, _SCALARS, path)
    if "kind" in values:
        try:
            values["kind"] = AcceleratorKind(values["kind"])
        except ValueError:
            raise CatalogError(f"{path}.kind: must be gpu or tpu (got {values['kind']!r})") from None
    for key in _FRACTIONS:
        name = _SCALARS[key][0]
        if name in values and not 0 < values[name] <= 1:
            raise CatalogError(f"{path}.{key}: must be in (0, 1] (got {values[name]!r})")
    rates = ("intraNodeBytesPerSecond", "interNodeBytesPerSecond")
    for key in ("memoryBytes", "bf16Flops", "fp32Flops", "hbmBytesPerSecond", "devicesPerNode", *rates):
        name = _SCALARS[key][0]
        if name in values and values[name] <= 0:
            raise CatalogError(f"{path}.{key}: must be > 0 (got {values[name]!r})")
    price: dict[str, Any] = {}
    if price_raw is not None:
        if not isinstance(price_raw, Mapping):
            raise CatalogError(f"{path}.price: must be a mapping of fields")
        price = _fields(price_raw, _PRICE, f"{path}.price")
        for key in ("asOf", "source", "spotAsOf", "spotSource"):
            if not str(price.get(_PRICE[key][0], "-")).strip():
                raise CatalogError(f"{path}.price.{key}: a price needs its date and source (got a blank)")
        if "spot_per_device_hour" in price:
            # A spot figure given here is dated and sourced by this entry, never by the base's.
            price.setdefault("spot_as_of", price.get("as_of", _NOT_GIVEN))
            price.setdefault("spot_source", price.get("source", _NOT_GIVEN))
        if base is not None and "on_demand_per_device_hour" in price:
            price.setdefault("as_of", _NOT_GIVEN)
            price.setdefault("source", _NOT_GIVEN)
    if aliases_raw is not None:
        if not isinstance(aliases_raw, list) or not all(isinstance(a, str) and a for a in aliases_raw):
            raise CatalogError(f"{path}.aliases: must be a list of names (got {aliases_raw!r})")
        values["aliases"] = tuple(a.casefold() for a in aliases_raw)
    if base is not None:
        merged_price = {f.name: getattr(base.price, f.name) for f in fields(ListPrice)} | price
        merged = {f.name: getattr(base, f.name) for f in fields(Accelerator)} | values
        merged["price"] = ListPrice(**merged_price)
        return Accelerator(**merged)
    missing = [k for k, (name, _) in _SCALARS.items() if name not in values and k not in _OPTIONAL]
    missing += [f"price.{k}" for k, (name, _) in _PRICE.items() if name not in price and k not in _PRICE_OPTIONAL]
    if missing:
        raise CatalogError(f"{path}: a new accelerator needs every field; missing {', '.join(missing)}")
    price.setdefault("spot_as_of", price["as_of"])
    price.setdefault("spot_source", price["source"])
    return Accelerator(id=acc_id, price=ListPrice(**price), **values)


def parse(data: Any, *, base: Catalog | None = None, source: str = "(inline)") -> Catalog:
    """A catalog from parsed YAML; entries of ``base`` are kept unless ``data`` overrides them."""
    if not isinstance(data, Mapping) or not isinstance(data.get("accelerators"), Mapping):
        raise CatalogError(f"{source}: must be a mapping with an 'accelerators' mapping of id → fields")
    extra = set(data) - {"accelerators"}
    if extra:
        raise CatalogError(f"{source}: unknown top-level field(s) {', '.join(sorted(map(str, extra)))}")
    out: dict[str, Accelerator] = dict(base.accelerators) if base is not None else {}
    for acc_id, raw in data["accelerators"].items():
        if not isinstance(acc_id, str) or not acc_id:
            raise CatalogError(f"{source}: accelerators: ids must be strings (got {acc_id!r})")
        out[acc_id] = _accelerator(acc_id, raw, out.get(acc_id), f"accelerators.{acc_id}")
    return Catalog(accelerators=MappingProxyType(out), source=source)


def _read_yaml(text: str, source: str) -> Any:
    try:
        docs = loader.safe_load_all(text)  # bounded: depth, aliases, huge or malformed numbers
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not valid YAML ({exc})") from None
    if len(docs) > 1:
        raise CatalogError(f"{source}: must hold one YAML document (got {len(docs)})")
    return docs[0] if docs else None


@functools.cache
def default() -> Catalog:
    """The catalog shipped with the package."""
    text = resources.files("accel_api").joinpath("catalog.yaml").read_text(encoding="utf-8")
    return parse(_read_yaml(text, "catalog.yaml"), source="catalog.yaml")


@functools.lru_cache(maxsize=16)
def _load_file(path: str, mtime_ns: int) -> Catalog:
    del mtime_ns  # part of the cache key only: an edited file is read again
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read ({exc})") from None
    return parse(_read_yaml(text, path), base=default(), source=path)


def load(path: str | Path | None = None) -> Catalog:
    """The shipped catalog, with the entries of the YAML file at ``path`` (if any) on top."""
    if path is None:
        return default()
    p = Path(path)
    if not p.is_file():
        raise CatalogError(f"{path}: no such file")
    return _load_file(str(p.resolve()), p.stat().st_mtime_ns)
