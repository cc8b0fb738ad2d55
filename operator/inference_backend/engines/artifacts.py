"""How an engine container gets the weights of a model (and of its draft), per URI scheme. Pure: no I/O.

- ``hf://org/repo[/file]``: the engine's own loader where it has one (vLLM and TGI take the repository id and
  download into an emptyDir cache; llama-server takes ``--hf-repo``/``--hf-file``), the token from the model's
  ``credentialsSecret`` (key ``HF_TOKEN``, and ``HF_ENDPOINT`` for a mirror when the Secret has it) as env vars from
  the Secret, never inline. Our runners take a local
  directory, so for them an init container downloads first (``inference-backend fetch``).
- ``pvc://claim/path``: the claim as a read-only volume mounted at /models (/draft-models for a draft).
- ``s3://``, ``gs://``, ``https://``: an init container running ``inference-backend fetch URI DIR`` (the operator
  image) into an emptyDir shared with the engine, credentials from the Secret.
- ``oci://image``: an image volume (``volumes[].image``, Kubernetes 1.33+ ImageVolume) mounted read-only.

With ``spec.model.cache`` (a PVC or a node path) the fetch init container downloads into the cache volume instead
of an emptyDir, under a directory named after the URI (``cache_key``), and the engine mounts that directory
read-only (``subPath``) where it would have found the emptyDir: a restarted pod or another replica finds the
completion marker ``fetch`` wrote and downloads nothing. hf:// then goes through the fetch step for every engine
(also those with their own loader, whose cache is a per-pod emptyDir), and so does an hf:// URI with a revision
(``hf://org/repo@rev``), which the engines' own loaders are not given.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, replace
from typing import Any

from inference_backend import __version__
from inference_backend.decision import InvalidSpec, ResolvedModel, WeightsCache

Json = dict[str, Any]
OPERATOR_IMAGE = f"ghcr.io/inference-backend/operator:{__version__}"
OPERATOR_ARCHS = frozenset({"amd64", "arm64"})
"""The operator image's platforms (the fetch init containers run it): .github/workflows/release.yaml builds
linux/amd64,linux/arm64."""
MOUNTS = {"model": "/models", "draft": "/draft-models"}
_FILE_SUFFIXES = (".gguf", ".onnx", ".safetensors", ".bin", ".pt", ".pth")
# Keys of the credentials Secret, as documented on ModelSource.credentialsSecret (api/inferencebackend.py).
_SECRET_KEYS: dict[str, tuple[tuple[str, bool], ...]] = {
    # HF_ENDPOINT (optional): a Hub mirror or a private Hub, as s3:// takes AWS_ENDPOINT_URL. Read by the fetch step
    # and by vLLM and TGI's download step through huggingface_hub (constants.py: ENDPOINT = os.getenv("HF_ENDPOINT");
    # 2.4.0 installed beside vLLM 0.33.0 here), and by llama-server (llama.cpp b11312 common/common.cpp
    # common_get_model_endpoint: MODEL_ENDPOINT, else HF_ENDPOINT).
    "hf": (("HF_TOKEN", False), ("HF_ENDPOINT", True)),
    "s3": (
        ("AWS_ACCESS_KEY_ID", False),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("AWS_ENDPOINT_URL", True),
        ("AWS_REGION", True),
    ),
    "gs": (("GOOGLE_APPLICATION_CREDENTIALS_JSON", False),),
    "https": (),
}


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


CLAIM_PLACEHOLDER = "weights"
"""The claim name of a spec.model.cache.storageClass cache when nothing named it (render.py always does)."""
FETCH_REQUESTS = {"cpu": "1", "memory": "1Gi"}
"""What a fetch init container requests (the selection counts it against the node's allocatable); render lowers
the CPU to the engine container's request when that is smaller."""
CACHE_VOLUME, CACHE_MOUNT = "weights-cache", "/weights-cache"
"""The spec.model.cache volume, and where the fetch init containers mount it (the engine mounts a subPath)."""


def cache_key(uri: str, namespace: str = "") -> str:
    """The cache directory of ``uri`` for a backend in ``namespace``: readable (namespace, scheme and path,
    lower-case, one dash for any other character) and unique (a hash of the namespace and the whole URI, its
    @revision included), at most 100 characters; a valid subPath (relative, no ``..``). A node path (hostPath) is
    shared by every namespace on the node: with the namespace in the key, a backend in one namespace cannot plant
    weights that another namespace's backend then serves (docs/security.md)."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{namespace}/{uri}".lower()).strip("-")[:80].rstrip("-")
    digest = hashlib.sha256(f"{namespace}\n{uri}".encode()).hexdigest()[:16]
    return f"{slug}-{digest}"


def cache_volume(cache: WeightsCache) -> Json:
    if cache.claim is not None or cache.storage_class is not None:
        # a StorageClass: the claim the operator creates, named by render.py (weights_claim_name) before rendering
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache.claim or CLAIM_PLACEHOLDER}}
    return {"name": CACHE_VOLUME, "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}


def _fetch(model: ResolvedModel, role: str, uri: str, scheme: str, field: str) -> Artifact:
    mount = MOUNTS[role]
    volume = f"{role}-weights"
    base = posixpath.basename(uri.split("?", 1)[0].rstrip("/"))
    local = f"{mount}/{base}" if base.endswith(_FILE_SUFFIXES) else mount
    cache = model.cache
    key = cache_key(uri, cache.namespace) if cache is not None else ""
    dest = f"{CACHE_MOUNT}/{key}" if cache is not None else mount
    command = ["inference-backend", "fetch", uri, dest]
    if scheme == "hf" and model.format != "safetensors" and not base.endswith(_FILE_SUFFIXES):
        command += ["--format", model.format]  # fetch's default for a repository is safetensors (else .bin)
    init: Json = {
        "name": f"fetch-{role}",
        "image": OPERATOR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        # `inference-backend fetch` (fetch.py): idempotent copy of a file or a prefix, progress on stdout; a
        # completion marker in the directory makes a later run (a restart, another replica) download nothing.
        "command": command,
    }
    env = secret_env(model.credentials_secret, scheme)
    if env:
        init["env"] = list(env)
    resources = {"requests": dict(FETCH_REQUESTS), "limits": {"memory": "2Gi"}}
    if cache is not None:
        init["volumeMounts"] = [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}]
        init["resources"] = resources
        return Artifact(
            scheme=scheme,
            local_path=local,
            volumes=(cache_volume(cache),),
            mounts=({"name": CACHE_VOLUME, "mountPath": mount, "subPath": key, "readOnly": True},),
            init_containers=(init,),
        )
    init["volumeMounts"] = [{"name": volume, "mountPath": mount}]
    init["resources"] = resources
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
    if model.cache is not None and scheme in ("pvc", "oci"):
        raise InvalidSpec(
            "spec.model.cache",
            f"the weights of {scheme}:// are already on a volume: nothing to cache (remove spec.model.cache)",
        )
    if scheme == "hf":
        parts = rest.split("/")
        if len(parts) < 2 or not parts[1].partition("@")[0] or parts[1].endswith("@"):
            raise InvalidSpec(field, f"{model.uri!r}: expected hf://org/repo[@revision][/file]")
        repo, file = "/".join(parts[:2]), "/".join(parts[2:]) or None
        if own_hf_loader and model.cache is None and "@" not in repo:
            return Artifact(scheme, hf_repo=repo, hf_file=file, env=secret_env(model.credentials_secret, "hf"))
        if model.format == "gguf" and file is None:
            why = "spec.model.cache" if model.cache is not None else field
            raise InvalidSpec(
                why,
                f"{model.uri!r}: name the GGUF file (hf://org/repo[@revision]/FILE.gguf) to fetch "
                "it; a repository holds several quantizations",
            )
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
        draft = replace(draft, credentials_secret=target.credentials_secret)
    fetched = bool(draft.uri and split_uri(draft.uri)[0] in ("hf", "s3", "gs", "https"))
    if target.cache is not None and draft.cache is None and fetched:
        draft = replace(draft, cache=target.cache)  # the draft goes into the target's cache, in its own directory
    return draft


# ---- LoRA adapters (spec.adapters) ------------------------------------------------------------------------------

ADAPTERS_DIR = "/adapters"
"""Where each adapter is in the engine container: /adapters/<name> (a PEFT directory, or the directory of a GGUF
adapter file)."""
ADAPTERS_VOLUME = "adapters"
"""The emptyDir the fetch init containers download adapters into (without spec.model.cache)."""


@dataclass(frozen=True)
class AdapterCheck:
    """What the fetch step checks in an adapter's files before the engine starts (``inference-backend fetch ...
    --adapter``): the engine's rank limit, the modules it can adapt, the format it loads, the declared rank, the base
    model's architecture."""

    max_rank: int
    adapter_format: str
    modules: tuple[str, ...] = ()
    rank: int | None = None
    base_architecture: str | None = None
    dora: bool = True

    def args(self) -> list[str]:
        out = ["--adapter", "--max-rank", str(self.max_rank), "--adapter-format", self.adapter_format]
        if self.modules:
            out += ["--target-modules", ",".join(self.modules)]
        if self.rank is not None:
            out += ["--rank", str(self.rank)]
        if self.base_architecture:
            out += ["--base-architecture", self.base_architecture]
        if not self.dora:
            out += ["--no-dora"]
        return out


def adapter(model: ResolvedModel, index: int, name: str, uri: str, check: AdapterCheck) -> Artifact:
    """The artifact of adapter ``index`` (spec.adapters[index]): fetched like the weights (the fetch init container,
    the model's credentialsSecret when the adapter is in the same store, spec.model.cache), checked by the fetch step
    against the engine's limits, at /adapters/<name> (``local_path``: the directory, or the GGUF file)."""
    field = f"spec.adapters[{index}].uri"
    scheme, rest = split_uri(uri)
    mount = f"{ADAPTERS_DIR}/{name}"
    base = posixpath.basename(uri.split("?", 1)[0].rstrip("/"))
    is_file = base.endswith(_FILE_SUFFIXES)
    if check.adapter_format == "gguf" and not base.endswith(".gguf"):
        raise InvalidSpec(field, f"{uri!r}: the engine loads GGUF adapter files: name the .gguf file")
    if check.adapter_format == "peft" and is_file:
        raise InvalidSpec(
            field,
            f"{uri!r}: the engine loads PEFT adapters: name the directory holding adapter_config.json, not one file",
        )
    same_store = model.uri is not None and split_uri(model.uri)[0] == scheme
    secret = model.credentials_secret if same_store else None
    if scheme in ("pvc", "oci"):
        volume = f"adapter-{index}"
        if scheme == "pvc":
            claim, _, path = rest.partition("/")
            source: Json = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
            local = f"{mount}/{path}" if path else mount
        else:
            source, local = {"image": {"reference": rest, "pullPolicy": "IfNotPresent"}}, mount
        init = _init(
            f"check-adapter-{index}",
            ["inference-backend", "adapter", "check", local, *check.args()[1:]],
            [{"name": volume, "mountPath": mount, "readOnly": True}],
            (),
        )
        return Artifact(
            scheme,
            local_path=local,
            volumes=({"name": volume, **source},),
            mounts=({"name": volume, "mountPath": mount, "readOnly": True},),
            init_containers=(init,),
        )
    if scheme == "hf":
        parts = rest.split("/")
        if len(parts) < 2 or not parts[1].partition("@")[0] or parts[1].endswith("@"):
            raise InvalidSpec(field, f"{uri!r}: expected hf://org/repo[@revision][/file]")
    elif scheme not in ("s3", "gs", "https"):
        raise InvalidSpec(field, f"unsupported uri scheme {scheme!r} (hf, s3, gs, pvc, oci, https)")
    local = f"{mount}/{base}" if is_file else mount
    env = secret_env(secret, scheme)
    cache = model.cache
    if cache is not None:
        dest = f"{CACHE_MOUNT}/{cache_key(uri)}"
        init = _init(
            f"fetch-adapter-{index}",
            ["inference-backend", "fetch", uri, dest, *check.args()],
            [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}],
            env,
        )
        return Artifact(
            scheme,
            local_path=local,
            volumes=(cache_volume(cache),),
            mounts=({"name": CACHE_VOLUME, "mountPath": mount, "subPath": cache_key(uri), "readOnly": True},),
            init_containers=(init,),
        )
    init = _init(
        f"fetch-adapter-{index}",
        ["inference-backend", "fetch", uri, mount, *check.args()],
        [{"name": ADAPTERS_VOLUME, "mountPath": ADAPTERS_DIR}],
        env,
    )
    return Artifact(
        scheme,
        local_path=local,
        volumes=({"name": ADAPTERS_VOLUME, "emptyDir": {}},),
        mounts=({"name": ADAPTERS_VOLUME, "mountPath": ADAPTERS_DIR, "readOnly": True},),
        init_containers=(init,),
    )


def _init(name: str, command: list[str], mounts: list[Json], env: tuple[Json, ...]) -> Json:
    init: Json = {"name": name, "image": OPERATOR_IMAGE, "imagePullPolicy": "IfNotPresent", "command": command}
    if env:
        init["env"] = list(env)
    init["volumeMounts"] = mounts
    init["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    return init
