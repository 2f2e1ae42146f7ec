"""accel_api: the custom resources of the accelerator job operator, as pydantic models.

This package is the single source of truth for the four CRDs (group ``accel.dev``, version
``v1alpha1``): the operator, the agent, ``accelctl`` and the generated ``crds/*.yaml`` all derive
from these models. It is pure: no Kubernetes client, no kopf, no I/O beyond parsing text.
"""

from accel_api.errors import InvalidResource
from accel_api.job import AcceleratorJob
from accel_api.loader import load_documents, parse_resource
from accel_api.nodereport import AcceleratorNodeReport
from accel_api.policy import AcceleratorPolicy
from accel_api.pool import AcceleratorPool

__all__ = [
    "AcceleratorJob",
    "AcceleratorNodeReport",
    "AcceleratorPolicy",
    "AcceleratorPool",
    "InvalidResource",
    "load_documents",
    "parse_resource",
]
