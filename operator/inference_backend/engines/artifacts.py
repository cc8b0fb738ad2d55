"""How an engine container gets the weights of a model (and of its draft), per URI scheme. Pure: no I/O.

- ``hf://org/repo[/file]``: the engine's own loader where it has one (vLLM and TGI take the repository id and
  download into an emptyDir cache; llama-server takes ``--hf-repo``/``--hf-file``), the token from the model's
  ``credentialsSecret`` (key ``HF_TOKEN``) as an env var from the Secret, never inline. Our runners take a local
  directory, so for them an init container downloads first (``inference-backend fetch``).
- ``pvc://claim/path``: the claim as a read-only volume mounted at /models (/draft-models for a draft).
- ``s3://``, ``gs://``, ``https://``: an init container running ``inference-backend fetch URI DIR`` (the operator
  image) into an emptyDir shared with the engine, credentials from the Secret.
- ``oci://image``: an image volume (``volumes[].image``, Kubernetes 1.33+ ImageVolume) mounted read-only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace
from typing import Any

from inference_backend import __version__
from inference_backend.decision import InvalidSpec, ResolvedModel

Json = dict[str, Any]
OPERATOR_IMAGE = f"ghcr.io/inference-backend/operator:{__version__}"
MOUNTS = {"model": "/models", "draft": "/draft-models"}
_FILE_SUFFIXES = (".gguf", ".onnx", ".safetensors", ".bin", ".pt", ".pth")
# Keys of the credentials Secret, as documented on ModelSource.credentialsSecret (api/inferencebackend.py).
_SECRET_KEYS: dict[str, tuple[tuple[str, bool], ...]] = {
    "hf": (("HF_TOKEN", False),),
    "s3": (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False), ("AWS_ENDPOINT_URL", True),
           ("AWS_REGION", True)),
    "gs": (("GOOGLE_APPLICATION_CREDENTIALS_JSON", False),),
    "https": (),
}  # fmt: skip


@dataclass(frozen=True)
class Artifact:
    """Where the engine finds the weights, and what the pod needs for that."""

    scheme: str
    local_path: str | None = None
    """Path of the weights (file or directory) inside the engine container, when they are local."""
    hf_repo: str | None = None
    """Hugging Face repository id, when the engine downloads it itself."""
    hf_file: str | None = None
    """File in the repository (GGUF), when the URI names one."""
    env: tuple[Json, ...] = ()
    volumes: tuple[Json, ...] = ()
    mounts: tuple[Json, ...] = ()
    init_containers: tuple[Json, ...] = ()

    @property
    def directory(self) -> str | None:
        """The local directory holding the weights (the parent of a single file)."""
        if self.local_path is None:
            return None
        if self.local_path.endswith(_FILE_SUFFIXES):
            return posixpath.dirname(self.local_path)
        return self.local_path

    @property
    def reference(self) -> str:
        """What to hand an engine that takes "a repository id or a local path" (vLLM, TGI)."""
        ref = self.local_path or self.hf_repo
        assert ref is not None
        return ref


def secret_env(secret: str | None, scheme: str) -> tuple[Json, ...]:
    """Env vars from the credentials Secret (secretKeyRef), never literal values; optional keys may be absent."""
    if secret is None:
        return ()
    out: list[Json] = []
    for key, optional in _SECRET_KEYS.get(scheme, ()):
        ref: Json = {"name": secret, "key": key}
        if optional:
            ref["optional"] = True
        out.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return tuple(out)


def split_uri(uri: str) -> tuple[str, str]:
    scheme, sep, rest = uri.partition("://")
    if not sep or not rest:
        raise InvalidSpec("spec.model.uri", f"{uri!r} is not scheme://path")
    return scheme, rest.strip("/")


def _fetch(model: ResolvedModel, role: str, uri: str, scheme: str, field: str) -> Artifact:
    mount = MOUNTS[role]
    volume = f"{role}-weights"
    base = posixpath.basename(uri.split("?", 1)[0].rstrip("/"))
    local = f"{mount}/{base}" if base.endswith(_FILE_SUFFIXES) else mount
    init: Json = {
        "name": f"fetch-{role}",
        "image": OPERATOR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        # `inference-backend fetch` (fetch.py): idempotent copy of a file or a prefix, progress on stdout.
        "command": ["inference-backend", "fetch", uri, mount],
    }
    env = secret_env(model.credentials_secret, scheme)
    if env:
        init["env"] = list(env)
    init["volumeMounts"] = [{"name": volume, "mountPath": mount}]
    init["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    return Artifact(
        scheme=scheme,
        local_path=local,
        volumes=({"name": volume, "emptyDir": {}},),
        mounts=({"name": volume, "mountPath": mount, "readOnly": True},),
        init_containers=(init,),
    )


def resolve(model: ResolvedModel, own_hf_loader: bool, role: str = "model") -> Artifact:
    """The artifact of ``model`` (role ``model`` or ``draft``) for an engine that downloads from the Hugging Face
    Hub itself (``own_hf_loader``, from its card) or not."""
    field = "spec.model.uri" if role == "model" else "spec.speculativeDecoding.draftModelRef"
    if model.uri is None:
        raise InvalidSpec(field, "the model has no uri (set it inline or on its Model)")
    scheme, rest = split_uri(model.uri)
    mount = MOUNTS[role]
    if scheme == "hf":
        parts = rest.split("/")
        if len(parts) < 2:
            raise InvalidSpec(field, f"{model.uri!r}: expected hf://org/repo[/file]")
        repo, file = "/".join(parts[:2]), "/".join(parts[2:]) or None
        if own_hf_loader:
            return Artifact(scheme, hf_repo=repo, hf_file=file, env=secret_env(model.credentials_secret, "hf"))
        return _fetch(model, role, model.uri, scheme, field)
    if scheme == "pvc":
        claim, _, path = rest.partition("/")
        volume = f"{role}-weights"
        return Artifact(
            scheme,
            local_path=f"{mount}/{path}" if path else mount,
            volumes=({"name": volume, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},),
            mounts=({"name": volume, "mountPath": mount, "readOnly": True},),
        )
    if scheme in ("s3", "gs", "https"):
        return _fetch(model, role, model.uri, scheme, field)
    if scheme == "oci":
        volume = f"{role}-weights"
        return Artifact(
            scheme,
            local_path=mount,
            # Kubernetes 1.33+ ImageVolume (k8s.io/api core/v1 ImageVolumeSource: reference, pullPolicy).
            volumes=({"name": volume, "image": {"reference": rest, "pullPolicy": "IfNotPresent"}},),
            mounts=({"name": volume, "mountPath": mount, "readOnly": True},),
        )
    raise InvalidSpec(field, f"unsupported uri scheme {scheme!r} (hf, s3, gs, pvc, oci, https)")


def draft_model(target: ResolvedModel, draft: ResolvedModel) -> ResolvedModel:
    """The draft as a ResolvedModel with credentials: a Model has no credentialsSecret of its own, so a draft
    in the same store (same URI scheme) as the target uses the target's Secret."""
    same_store = bool(target.uri and draft.uri and split_uri(target.uri)[0] == split_uri(draft.uri)[0])
    if draft.credentials_secret is None and same_store:
        return replace(draft, credentials_secret=target.credentials_secret)
    return draft
