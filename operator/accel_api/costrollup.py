"""The durable cost rollup: what ended attempts cost, kept after their jobs are deleted.

A ConfigMap the operator owns (``accel-cost-rollup`` in its namespace, key ``rollup.json``) holds
one :class:`CostRollup`: the figures of every attempt folded into it, per UTC day, team, pool and
capacity type (``buckets``); the buckets too old or too many to keep, per team, pool and capacity
type (``before``: the counters still count them); a bounded list of deleted jobs' summaries (for
``accelctl cost report --by job``); the (job uid, attempts) keys folded that the jobs' own
status does not show yet (``pending``), and the deleted jobs folded whole (``gone``: a 64-bit
digest of the uid and the last attempt folded, per hour of deletion, packed in one string), so
a fold is never repeated.

Every list is bounded here (counts) and the whole value by size in ``reconcile.rollup`` (a
ConfigMap holds at most 1 MiB): the money itself never leaves the rollup, only its detail does —
old days fold into ``before``, and a job summary beyond the bound is dropped (its money stays in
the buckets).
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BeforeValidator, Field

from accel_api import bounds
from accel_api.base import ApiModel
from accel_api.enums import CapacityType

ROLLUP_DAYS = 400  # daily buckets kept (a 366-day report reads whole days)
# Buckets are kept per UTC hour for this many days (a window that starts or ends within them is
# exact to the hour), per UTC day after that.
ROLLUP_HOUR_DAYS = 7
ROLLUP_BUCKETS = 4096
ROLLUP_KEYS = 1024  # (team, pool, capacity type) totals in ``before``
ROLLUP_JOBS = 256  # deleted jobs' summaries
ROLLUP_JOB_DAYS = 8  # days per job summary (older days merge into the first kept)
ROLLUP_PENDING = 4096  # job uids with folded attempts their status does not show yet
ROLLUP_ATTEMPTS = 64  # attempts per pending uid
# Deleted jobs whose every attempt is folded, kept for a while (``accounting.rollup.GONE_KEEP``) so
# a lagging view folds nothing twice: at most this many (the oldest go first), about 13 bytes
# each. 11,500 deletions in 6 hours made 1 MiB of ``pending`` before; now at most about 210 KiB.
ROLLUP_GONE = 16_384
ROLLUP_GONE_HOURS = 64  # hour groups of ``gone`` (GONE_KEEP is 6 hours: a few are ever held)
GONE_DIGEST_CHARS = 11  # a 64-bit digest in URL-safe base64, no padding
ROLLUP_BYTES = 900 * 1024  # the JSON's size; a ConfigMap holds 1 MiB


def stored_json(value: ApiModel) -> str:
    """``value`` as the rollup's ConfigMaps store it: wire names, no nulls, no spaces (its size is
    what the bounds above count)."""
    return json.dumps(value.model_dump(by_alias=True, mode="json", exclude_none=True), separators=(",", ":"))


# Seven figures in a fixed order (compact on the wire): spent, lost to preemption, idle,
# on-demand equivalent (USD), device-seconds, lost device-seconds, idle device-seconds.
FIGURES = 7
_Num = Annotated[float, Field(ge=0, le=bounds.STATUS_USD_MAX)]
Figures7 = Annotated[list[_Num], Field(min_length=FIGURES, max_length=FIGURES)]
_Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$", max_length=10)]
# A bucket's period: a UTC day (``2026-11-26``) or one hour of it (``2026-11-26T13``).
_Period = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}(T\d{2})?$", max_length=13)]
_Team = Annotated[str, Field(max_length=bounds.DNS_LABEL_LENGTH)]
_Uid = Annotated[str, Field(min_length=1, max_length=bounds.SHORT_TEXT_LENGTH)]


class Bucket(ApiModel):
    """What the folded attempts of ``team`` spent on ``pool`` (``capacityType``) in one UTC day or,
    for recent money, one UTC hour (``day`` is then ``YYYY-MM-DDTHH``)."""

    day: _Period
    team: _Team
    pool: bounds.ObjectName
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    f: Figures7


class KeyTotals(ApiModel):
    """Buckets no longer kept per day, summed per (team, pool, capacity type)."""

    team: _Team
    pool: bounds.ObjectName
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    f: Figures7


class JobDay(ApiModel):
    day: _Day
    pool: bounds.ObjectName
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    f: Figures7


class JobFigures(ApiModel):
    """A job (who it is, its forecast) and its folded figures per day and pool: what a deleted
    job's summary and an open attempt share."""

    uid: _Uid
    namespace: bounds.ObjectName
    name: bounds.ObjectName
    team: _Team
    forecast_usd: bounds.StatusUsd = None
    days: Annotated[
        list[JobDay], BeforeValidator(bounds.keep_last(ROLLUP_JOB_DAYS)), Field(max_length=ROLLUP_JOB_DAYS)
    ] = Field(default_factory=list)


class JobSummary(JobFigures):
    """A deleted job's folded figures per day and pool (its report row once it is gone)."""

    deleted: bounds.Time


class Pending(ApiModel):
    """Attempts of job ``uid`` folded into the rollup that its status does not mark yet (or the
    job is gone: kept until ``gone`` is old, so a lagging view folds nothing twice)."""

    uid: _Uid
    attempts: Annotated[list[bounds.Count], Field(max_length=ROLLUP_ATTEMPTS)] = Field(default_factory=list)
    gone: bounds.Time | None = None


# One deleted job: the uid's digest, then the last attempt folded (decimal); entries joined by ",".
_GONE_ENTRY = rf"[A-Za-z0-9_-]{{{GONE_DIGEST_CHARS}}}[0-9]{{1,10}}"


class GoneHour(ApiModel):
    """The jobs deleted (and folded whole) in one UTC hour ``hour`` (``YYYY-MM-DDTHH``): ``ids``
    holds, for each, its uid's digest and the last attempt folded (every attempt up to it is in
    the rollup), comma-separated: a job costs about 13 bytes, not a JSON object."""

    hour: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}$", max_length=13)]
    ids: Annotated[
        str, Field(pattern=rf"^({_GONE_ENTRY}(,{_GONE_ENTRY})*)?$", max_length=ROLLUP_GONE * (GONE_DIGEST_CHARS + 11))
    ] = ""


class CostRollup(ApiModel):
    revision: Annotated[int, Field(ge=0, le=bounds.GENERATION_MAX)] = 0
    buckets: Annotated[list[Bucket], Field(max_length=ROLLUP_BUCKETS)] = Field(default_factory=list)
    before: Annotated[list[KeyTotals], Field(max_length=ROLLUP_KEYS)] = Field(default_factory=list)
    jobs: Annotated[list[JobSummary], BeforeValidator(bounds.keep_last(ROLLUP_JOBS)), Field(max_length=ROLLUP_JOBS)] = (
        Field(default_factory=list)
    )
    pending: Annotated[
        list[Pending], BeforeValidator(bounds.keep_last(ROLLUP_PENDING)), Field(max_length=ROLLUP_PENDING)
    ] = Field(default_factory=list)
    gone: Annotated[
        list[GoneHour], BeforeValidator(bounds.keep_last(ROLLUP_GONE_HOURS)), Field(max_length=ROLLUP_GONE_HOURS)
    ] = Field(default_factory=list)


# --- open attempts: what running attempts cost so far, kept beside the rollup ----------------------

ROLLUP_OPEN_SHARDS = 8  # ConfigMaps ``<rollup>-open-<i>``
ROLLUP_OPEN_PER_SHARD = 4096
ROLLUP_OPEN_BYTES = 800 * 1024  # one shard's JSON


class OpenAttempt(JobFigures):
    """An attempt not folded yet (running, or ended since the last fold), as accrued through
    ``through``: if its job is deleted while no operator runs, the next one folds this (at most
    one accrual tick is lost) instead of losing the attempt."""

    attempt: bounds.Count
    through: bounds.Time


class OpenShard(ApiModel):
    """One ConfigMap's share of the open attempts (the shards together hold them all)."""

    attempts: Annotated[list[OpenAttempt], Field(max_length=ROLLUP_OPEN_PER_SHARD)] = Field(default_factory=list)
