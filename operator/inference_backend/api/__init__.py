"""The InferenceBackend and Model API (serving.inferencebackend.io/v1alpha1) as pydantic models.

The CRD YAML in ``crds/`` is generated from these models by :mod:`inference_backend.crdgen`
(schema machinery in :mod:`inference_backend.api.crd`).
"""

from inference_backend.api.inferencebackend import (
    InferenceBackend,
    InferenceBackendSpec,
    InferenceBackendStatus,
)
from inference_backend.api.model import Model, ModelSpec
from inference_backend.vocabulary import API_VERSION, GROUP, VERSION

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "InferenceBackend",
    "InferenceBackendSpec",
    "InferenceBackendStatus",
    "Model",
    "ModelSpec",
]
