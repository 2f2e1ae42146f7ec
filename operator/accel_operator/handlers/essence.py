"""kopf's diff-base storage for an operator without create/update/delete handlers.

For every event of every watched object, kopf builds the object's "essence" (a deep copy of the
whole body, less metadata and status) and compares it with the last handled one, to find the
changes its create/update/field handlers react to. This operator has none of those: its handlers
are indexes and ``on.event`` handlers, which never look at the diff. Measured with cProfile on the
scale benchmark, that deep copy was the largest single cost of the operator's CPU (12 s of 35 s
over 500 jobs). :class:`NoEssence` builds an empty essence instead.

If a create/update/delete/resume/field handler is ever added, remove this: with an empty essence
kopf would see no change to react to. ``tests/unit/operator/test_kopf_wiring.py`` fails while
both are registered.
"""

from __future__ import annotations

from collections.abc import Iterable

import kopf


class NoEssence(kopf.AnnotationsDiffBaseStorage):
    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[kopf.FieldSpec] | None = None,
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def install(settings: kopf.OperatorSettings) -> None:
    settings.persistence.diffbase_storage = NoEssence()
