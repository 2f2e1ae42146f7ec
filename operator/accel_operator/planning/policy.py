"""Pure policy evaluation: does an AcceleratorJob break an AcceleratorPolicy?

One function, :func:`evaluate`, used by the admission webhook, the reconciler (which checks again:
policies and spend change after admission) and ``accelctl validate --policy`` offline. It reads
frozen values only; the caller fetches the policies, the namespace's team label
(``vocabulary.LABEL_NAMESPACE_TEAM``), the pools and the spend.

Several policies combine: every rule of every policy applies, and each breach is one
:class:`Violation` naming its policy and rule. Rules:

- ``namespace-team``: the job names the team of its namespace (when the namespace is labelled);
  a job in an unlabelled namespace (``namespace_team=None``) may not name a team that some
  labelled namespace holds (``bound_teams``): a team with namespaces of its own is bound to them;
- ``spot-needs-checkpoint``, ``spot-checkpoint-interval``, ``spot-checkpoint-scheme``: a job that
  may run on spot (``spot.policy`` prefer or require) checkpoints, often enough, to an allowed scheme;
- ``pool-access``: the pools the job names are granted to its team (with ``pools``, also: some
  known pool is granted to it at all);
- ``max-devices``: ``minDevices`` (and an explicit ``maxDevices``) within ``maxDevicesPerJob``;
  a job that leaves ``maxDevices`` unset is capped by the planner (:func:`device_cap`), not refused;
- ``reserved-env``: no env name the policy reserves;
- ``checkpoint-prefix``: an ``s3://`` ``spec.checkpoint.uri`` lies at or below a prefix the
  policy's ``checkpointAccess`` grants the job's team (a policy without those rules allows any;
  ``pvc://`` claims live in the job's own namespace and are not governed). Matched on normalised
  URIs, segment by segment (:func:`checkpoint_within`);
- ``budget-exceeds-limit``: the job's ``maxCost`` alone is over its team's budget (refused);
- ``policy-invalid``: a stored policy the models refuse (:class:`BrokenPolicy`) fails closed: every
  job it would govern is refused until the policy is fixed (else its budgets, grants, device cap
  and spot rules would all switch off, silently);
- ``budget-exhausted``: the team's spend this period (``spent``, keyed by :func:`spend_key`), plus the
  job's ``maxCost`` when given, reaches the budget: with ``onExhausted: queue`` (the default)
  ``queue=True``, the job waits for the next period or a larger budget rather than failing; with
  ``refuse`` it is refused.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from pydantic import ValidationError

from accel_api import errors, vocabulary
from accel_api.enums import BudgetAction, BudgetPeriod, SpotPolicy
from accel_api.job import AcceleratorJobSpec
from accel_api.policy import AcceleratorPolicy, AcceleratorPolicySpec
from accel_api.pool import AcceleratorPoolSpec
from accel_operator.planning.candidates import OWN_MAX_DEVICES, PoolOffer

ANY = "*"


@dataclass(frozen=True)
class Violation:
    field: str  # YAML path in the job, e.g. spec.checkpoint
    rule: str  # kebab-case rule id
    policy: str | None  # the AcceleratorPolicy's name; None for the namespace's team label
    message: str
    fix: str | None = None
    queue: bool = False  # transient (spend): wait and evaluate again rather than refuse

    def __str__(self) -> str:
        by = f" by policy '{self.policy}'" if self.policy is not None else ""
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.field}: {self.message}{by} (rule {self.rule}){fix}"


# The keys of a policy's spec whose rules apply only to the teams they name; every other rule
# (spot, maxDevicesPerJob, reservedEnv, consolidation) applies to every job.
_TEAM_SCOPED = frozenset({"budgets", "poolAccess", "checkpointAccess", "idle"})
BROKEN_PROBLEMS = 3  # problems a BrokenPolicy keeps (each clipped), for its condition and the jobs' messages


@dataclass(frozen=True)
class BrokenPolicy:
    """A stored AcceleratorPolicy the models refuse (an older CRD, or one applied while a rule was
    absent). Its rules cannot be read, so it fails closed: every job it would govern is refused.
    ``teams`` are the teams it names, read from the raw object as far as it can be; None when it
    may govern every job (a rule for every team, a ``*``, or nothing readable)."""

    name: str
    problems: tuple[str, ...]
    teams: frozenset[str] | None

    def governs(self, job: AcceleratorJobSpec) -> bool:
        # A spot job is always governed: the spot rules apply to every team, and by default.
        return self.teams is None or job.team in self.teams or job.spot.policy is not SpotPolicy.NEVER

    def governed(self) -> str:
        """Which jobs it holds, in words."""
        if self.teams is None:
            return "every job"
        return "every spot job and the jobs of team(s) " + ", ".join(errors.clip(t) for t in sorted(self.teams)[:8])


def broken(name: str, body: Mapping[str, Any], problems: Sequence[str]) -> BrokenPolicy:
    """The :class:`BrokenPolicy` for the raw object ``body`` that the models refused with ``problems``."""
    kept = tuple(p if len(p) <= 200 else p[:199] + "…" for p in problems[:BROKEN_PROBLEMS])
    # The name is the API server's (a DNS subdomain, at most 253 characters): shown as it is.
    return BrokenPolicy(name[:253], kept or ("the policy does not parse",), _named_teams(body.get("spec")))


def read(name: str, body: Mapping[str, Any]) -> AcceleratorPolicy | BrokenPolicy:
    """The stored policy ``body`` as the models read it, or, when they refuse it, what fails closed
    in its place (the ``policies`` index's value)."""
    try:
        return AcceleratorPolicy.model_validate(dict(body))
    except ValidationError as exc:
        return broken(name, body, errors.describe(exc, model=AcceleratorPolicy, limit=BROKEN_PROBLEMS))


def _named_teams(spec: Any) -> frozenset[str] | None:
    if not isinstance(spec, Mapping) or not set(spec) <= _TEAM_SCOPED:
        return None
    names: list[Any] = []
    for key, field, many in (
        ("budgets", "team", False),
        ("poolAccess", "teams", True),
        ("checkpointAccess", "teams", True),
    ):
        items = spec.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            return None
        for item in items:
            value = item.get(field)
            if many != isinstance(value, list):
                return None  # not the shape the field has: unreadable
            names.extend(value if many else [value])
    idle = spec.get("idle", {})
    if not isinstance(idle, Mapping) or not isinstance(idle.get("teams", []), list):
        return None
    idle_teams = idle.get("teams", [])
    if "idle" in spec and not idle_teams:
        return None  # idle rules without teams apply to every team
    names.extend(idle_teams)
    if not names or not all(isinstance(n, str) for n in names) or ANY in names:
        return None
    return frozenset(names)


def spend_key(team: str, period: BudgetPeriod) -> str:
    """The key of ``spent`` for a team's spend in the current ``period``, e.g. ``research/monthly``."""
    return f"{team}/{period.value}"


def evaluate(
    job: AcceleratorJobSpec,
    namespace_team: str | None,
    policies: Sequence[AcceleratorPolicy],
    *,
    pools: Mapping[str, AcceleratorPoolSpec] | None = None,
    spent: Mapping[str, float] | None = None,
    broken: Sequence[BrokenPolicy] = (),
    bound_teams: Collection[str] = (),
) -> list[Violation]:
    """Every breach of ``policies`` (and of the namespace's team, and every ``broken`` policy that
    governs it) by ``job``; empty when admitted. ``bound_teams``: the teams some namespace is
    labelled with."""
    out: list[Violation] = []
    if namespace_team is None and job.team in bound_teams:
        out.append(
            Violation(
                "spec.team",
                "namespace-team",
                None,
                f"team {errors.clip(job.team)} is bound to the namespaces labelled "
                f"{vocabulary.LABEL_NAMESPACE_TEAM}={errors.clip(job.team)}, and this namespace has no team label",
                f"submit it in a namespace of team {errors.clip(job.team)}, or have this namespace labelled "
                f"{vocabulary.LABEL_NAMESPACE_TEAM}={errors.clip(job.team)}",
            )
        )
    for bad in broken:
        if bad.governs(job):
            out.append(
                Violation(
                    "spec",
                    "policy-invalid",
                    bad.name,
                    f"cannot be checked: the policy does not parse ({bad.problems[0]}), and holds "
                    f"{bad.governed()} until it is fixed",
                    f"the platform team fixes policy '{bad.name}' (its Valid condition names the field)",
                )
            )
    if namespace_team is not None and job.team != namespace_team:
        out.append(
            Violation(
                "spec.team",
                "namespace-team",
                None,
                f"must be {errors.clip(namespace_team)}, the team of its namespace (got {errors.clip(job.team)})",
                f"set spec.team to {errors.clip(namespace_team)}, or submit in a namespace labelled "
                f"{vocabulary.LABEL_NAMESPACE_TEAM}={errors.clip(job.team)}",
            )
        )
    for pol in policies:
        name = pol.metadata.name or "(unnamed)"
        out.extend(_spot(job, pol.spec, name))
        out.extend(_pool_access(job, pol.spec, name, pools))
        out.extend(_devices(job, pol.spec, name))
        out.extend(_env(job, pol.spec, name))
        out.extend(_checkpoint_access(job, pol.spec, name))
        out.extend(_budgets(job, pol.spec, name, spent or {}))
    return out


def refusals(violations: Iterable[Violation]) -> list[Violation]:
    """The violations that refuse the job now (not the ones it may wait out)."""
    return [v for v in violations if not v.queue]


def _spot(job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str) -> list[Violation]:
    rules = spec.spot
    if job.spot.policy is SpotPolicy.NEVER:
        return []
    schemes = " or ".join(f"{s}://" for s in rules.allowed_checkpoint_schemes) or "(none allowed)"
    ckpt = job.checkpoint
    if ckpt is None:
        if not rules.require_checkpoint:
            return []
        return [
            Violation(
                "spec.checkpoint",
                "spot-needs-checkpoint",
                name,
                "required for spot jobs",
                f"add spec.checkpoint with an {schemes} uri, or set spec.spot.policy: never",
            )
        ]
    out: list[Violation] = []
    limit = rules.max_checkpoint_interval_minutes
    if limit is not None and ckpt.interval_minutes > limit:
        out.append(
            Violation(
                "spec.checkpoint.intervalMinutes",
                "spot-checkpoint-interval",
                name,
                f"must be at most {limit:g} for spot jobs (got {ckpt.interval_minutes:g})",
                f"set spec.checkpoint.intervalMinutes to {limit:g} or less",
            )
        )
    if ckpt.scheme not in rules.allowed_checkpoint_schemes:
        out.append(
            Violation(
                "spec.checkpoint.uri",
                "spot-checkpoint-scheme",
                name,
                f"must be an {schemes} uri for spot jobs (got {errors.clip(ckpt.scheme + '://')})",
                f"checkpoint to an {schemes} uri",
            )
        )
    return out


def allowed_pools(team: str, spec: AcceleratorPolicySpec) -> frozenset[str] | None:
    """The pools ``spec`` grants ``team`` (``"*"`` among them: every pool); None: no access rules."""
    if not spec.pool_access:
        return None
    return frozenset(p for rule in spec.pool_access if team in rule.teams or ANY in rule.teams for p in rule.pools)


def pool_allowed(team: str, pool: str, policies: Sequence[AcceleratorPolicy]) -> bool:
    """Whether every policy grants ``team`` the pool ``pool`` (for the planner's candidates)."""
    for pol in policies:
        granted = allowed_pools(team, pol.spec)
        if granted is not None and ANY not in granted and pool not in granted:
            return False
    return True


def _capping(policies: Sequence[AcceleratorPolicy]) -> AcceleratorPolicy | None:
    """The policy with the smallest ``maxDevicesPerJob`` (the first by name among equals)."""
    capped = [p for p in policies if p.spec.max_devices_per_job is not None]
    return min(capped, key=lambda p: (p.spec.max_devices_per_job, p.metadata.name or "")) if capped else None


def device_cap(policies: Sequence[AcceleratorPolicy]) -> int | None:
    """The most devices any job may get under ``policies`` (for the planner), None: no cap."""
    first = _capping(policies)
    return first.spec.max_devices_per_job if first is not None else None


def cap_source(policies: Sequence[AcceleratorPolicy]) -> str:
    """Where :func:`device_cap` comes from, as the planner's sentences name it."""
    first = _capping(policies)
    return f"policy '{first.metadata.name}' maxDevicesPerJob" if first is not None else OWN_MAX_DEVICES


def restrict(
    job: AcceleratorJobSpec, offers: Sequence[PoolOffer], policies: Sequence[AcceleratorPolicy]
) -> tuple[AcceleratorJobSpec, list[PoolOffer]]:
    """What the planner may consider for ``job`` under ``policies``: only the pools granted to its
    team (:func:`pool_allowed`), and at most :func:`device_cap` devices (``maxDevices`` lowered to
    the cap; a ``minDevices`` above it is a ``max-devices`` refusal, left to :func:`evaluate`)."""
    if not policies:
        return job, list(offers)
    grants = [g for pol in policies if (g := allowed_pools(job.team, pol.spec)) is not None and ANY not in g]
    # pool_allowed, each grant built once (none: every pool, without a look at each)
    allowed = [o for o in offers if all(o.name in g for g in grants)] if grants else list(offers)
    cap = device_cap(policies)
    place = job.placement
    if cap is None or cap < place.min_devices or (place.max_devices is not None and place.max_devices <= cap):
        return job, allowed
    return job.model_copy(update={"placement": place.model_copy(update={"max_devices": cap})}), allowed


def _pool_access(
    job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str, pools: Mapping[str, AcceleratorPoolSpec] | None
) -> list[Violation]:
    granted = allowed_pools(job.team, spec)
    if granted is None or ANY in granted:
        return []
    shown = ", ".join(sorted(granted)[:8]) or "(none)"
    out = [
        Violation(
            f"spec.placement.pools[{i}]",
            "pool-access",
            name,
            f"team {errors.clip(job.team)} may not use pool {errors.clip(pool)}",
            f"name only pools granted to the team: {shown}",
        )
        for i, pool in enumerate(job.placement.pools)
        if pool not in granted
    ]
    if not out and not job.placement.pools and pools is not None and not granted.intersection(pools):
        out.append(
            Violation(
                "spec.team",
                "pool-access",
                name,
                f"team {errors.clip(job.team)} is granted no existing pool",
                "ask the platform team for pool access",
            )
        )
    return out


def _devices(job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str) -> list[Violation]:
    cap = spec.max_devices_per_job
    if cap is None:
        return []
    out: list[Violation] = []
    place = job.placement
    if place.min_devices > cap:
        out.append(
            Violation(
                "spec.placement.minDevices",
                "max-devices",
                name,
                f"must be at most {cap} (got {place.min_devices})",
                f"set spec.placement.minDevices to {cap} or less",
            )
        )
    if place.max_devices is not None and place.max_devices > cap:
        out.append(
            Violation(
                "spec.placement.maxDevices",
                "max-devices",
                name,
                f"must be at most {cap} (got {place.max_devices})",
                f"set spec.placement.maxDevices to {cap} or less, or leave it unset",
            )
        )
    return out


def _env(job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str) -> list[Violation]:
    if not spec.reserved_env:
        return []
    return [
        Violation(
            f"spec.env[{i}].name",
            "reserved-env",
            name,
            f"is reserved (got {errors.clip(var.name)})",
            "remove it or rename it; reserved: " + ", ".join(spec.reserved_env[:8]),
        )
        for i, var in enumerate(job.env)
        if vocabulary.is_reserved_env(var.name, spec.reserved_env)
    ]


# Prefixes spelled out in a checkpoint-prefix refusal; the rest are counted.
PREFIXES_SHOWN: Final = 4
_GOVERNED_SCHEME: Final = "s3"


def _segments(uri: str) -> tuple[str, str, tuple[str, ...]] | None:
    """``s3://b/a/b/`` -> ``("s3", "b", ("a", "b"))``; None for a URI that names no one place: no
    scheme or bucket, or an empty, ``.`` or ``..`` segment, or one that decodes to such a segment or
    holds ``/`` or ``\\`` once percent-decoded (tools that decode would read another path than
    the one compared). A single trailing ``/`` is dropped: a prefix is a directory either way."""
    scheme, sep, rest = uri.partition("://")
    bucket, _, path = rest.partition("/")
    if not sep or not scheme or not bucket:
        return None
    parts = path.split("/") if path else []
    if parts and parts[-1] == "":
        parts.pop()
    for part in parts:
        decoded = unquote(part)
        if decoded in ("", ".", "..") or "/" in decoded or "\\" in decoded:
            return None
    return scheme, bucket, tuple(parts)


def checkpoint_within(uri: str, prefix: str) -> bool:
    """Whether ``uri`` is ``prefix`` or lies below it: the same scheme and bucket, and the prefix's
    path segments are the first segments of the URI's, compared exactly as S3 keys are (so
    ``s3://b/team`` holds ``s3://b/team/run`` but not ``s3://b/team-other/run`` nor ``s3://bb/team``).
    A URI or prefix that does not normalise (:func:`_segments`) is within nothing."""
    u, p = _segments(uri), _segments(prefix)
    if u is None or p is None or u[:2] != p[:2]:
        return False
    return u[2][: len(p[2])] == p[2]


def checkpoint_prefixes(team: str, spec: AcceleratorPolicySpec) -> list[str] | None:
    """The checkpoint prefixes ``spec`` grants ``team``, in the policy's order; None: no rules."""
    if not spec.checkpoint_access:
        return None
    return [p for rule in spec.checkpoint_access if team in rule.teams or ANY in rule.teams for p in rule.prefixes]


def _checkpoint_access(job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str) -> list[Violation]:
    ckpt = job.checkpoint
    if ckpt is None or ckpt.scheme != _GOVERNED_SCHEME:
        return []
    granted = checkpoint_prefixes(job.team, spec)
    if granted is None or any(checkpoint_within(ckpt.uri, p) for p in granted):
        return []
    team = errors.clip(job.team)
    if not granted:
        fix = f"ask the platform team for a checkpoint prefix for team {team} (checkpointAccess)"
    else:
        shown = ", ".join(errors.clip(p) for p in granted[:PREFIXES_SHOWN])
        more = f" and {len(granted) - PREFIXES_SHOWN} more" if len(granted) > PREFIXES_SHOWN else ""
        fix = f"checkpoint under a prefix granted to team {team}: {shown}{more}"
    return [
        Violation(
            "spec.checkpoint.uri",
            "checkpoint-prefix",
            name,
            f"team {team} may not checkpoint to {errors.clip(ckpt.uri)}: it is under none of the team's "
            f"{len(granted)} allowed prefix(es)",
            fix,
        )
    ]


def _budgets(
    job: AcceleratorJobSpec, spec: AcceleratorPolicySpec, name: str, spent: Mapping[str, float]
) -> list[Violation]:
    out: list[Violation] = []
    for budget in spec.budgets:
        if budget.team != job.team:
            continue
        period = budget.period.value
        limit = budget.limit_usd
        if job.max_cost is not None and job.max_cost > limit:
            out.append(
                Violation(
                    "spec.maxCost",
                    "budget-exceeds-limit",
                    name,
                    f"must be at most the team's {period} budget of ${limit:,.2f} (got ${job.max_cost:,.2f})",
                    f"set spec.maxCost to {limit:g} or less",
                )
            )
            continue
        used = spent.get(spend_key(job.team, budget.period), 0.0)
        need = job.max_cost or 0.0
        if used >= limit or used + need > limit:
            queue = budget.on_exhausted is BudgetAction.QUEUE
            out.append(
                Violation(
                    "spec.team",
                    "budget-exhausted",
                    name,
                    f"team {errors.clip(job.team)} has spent ${used:,.2f} of its {period} budget of ${limit:,.2f}"
                    + (f" (the job may cost ${need:,.2f})" if need else ""),
                    f"wait for the next {period} period, or ask the platform team for a larger budget"
                    if queue
                    else f"submit it again in the next {period} period, or ask the platform team for a larger budget",
                    queue=queue,
                )
            )
    return out
