"""The pure choice of the checkpoint to resume from (reconcile.checkpoints)."""

import datetime as dt

from accel_api import bounds
from accel_api import vocabulary as v
from accel_operator.reconcile.common.checkpoints import Checkpoint, by_step_descending, newest, reported, step_of

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_step_of_reads_only_step_names() -> None:
    assert step_of("step-120") == 120
    assert step_of("step-0007/") == 7
    assert step_of("step-") is None
    assert step_of("step-1a") is None
    assert step_of("step-١٢") is None  # non-ASCII digits
    assert step_of("latest") is None
    assert step_of("120") is None


def test_a_step_beyond_what_status_holds_is_not_plausible() -> None:
    """``status.lastCheckpoint.step`` holds at most 2^53: a larger step is never chosen, else its
    status write would be refused on every pass and the job never resume."""
    assert step_of(f"step-{bounds.GENERATION_MAX}") == bounds.GENERATION_MAX
    assert step_of(f"step-{bounds.GENERATION_MAX + 1}") is None
    assert step_of("step-999999999999999999") is None
    assert by_step_descending(["step-999999999999999999", "step-3"]) == [["step-3"]]
    huge = {v.ANNOTATION_CHECKPOINT: "pvc://c/r/step-3", v.ANNOTATION_CHECKPOINT_STEP: "999999999999999999"}
    got = reported(huge, T0)
    assert got is not None and got.step == 3  # the step read from the path instead


def test_newest_complete_step_wins_ties_by_time() -> None:
    a = Checkpoint("s3://b/p/step-10", 10, T0 + dt.timedelta(hours=1))
    b = Checkpoint("s3://b/p/step-20", 20, T0)
    c = Checkpoint("s3://b/p/step-020", 20, T0 + dt.timedelta(seconds=1))
    assert newest([a, b]) == b
    assert newest([a, b, c]) == c
    assert newest([]) is None


def test_groups_highest_step_first() -> None:
    assert by_step_descending(["step-2", "junk", "step-10", "step-02", "step-1"]) == [
        ["step-10"],
        ["step-02", "step-2"],
        ["step-1"],
    ]


def test_reported_by_the_job() -> None:
    assert reported({}, T0) is None
    assert reported({v.ANNOTATION_CHECKPOINT: " "}, T0) is None
    got = reported({v.ANNOTATION_CHECKPOINT: "/ckpt/run/step-40/", v.ANNOTATION_CHECKPOINT_STEP: "40"}, T0)
    assert got == Checkpoint("/ckpt/run/step-40", 40, T0)
    assert reported({v.ANNOTATION_CHECKPOINT: "/ckpt/run/step-41"}, T0) == Checkpoint("/ckpt/run/step-41", 41, T0)
    assert reported({v.ANNOTATION_CHECKPOINT: "/ckpt/x", v.ANNOTATION_CHECKPOINT_STEP: "-1"}, T0) == Checkpoint(
        "/ckpt/x", 0, T0
    )
