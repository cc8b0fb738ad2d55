"""The image policy: a registry mirror, per-image overrides (repository, tag, digest) and image pull secrets, applied
by render to every pod template it renders (Deployments, a LeaderWorkerSet's leader and worker templates). Pure: no
I/O.

The images it rewrites are the ones the operator picks itself: the pinned engine images (each engine module's
``IMAGE`` constants) and the fetch init container's image, listed by key in ``engines.image_catalog.CATALOG`` (the
Helm chart's ``engineImages.<key>``). An image a user wrote (``spec.engine.image``, an ``oci://`` model reference)
is the user's and is left as written. Order: the override of the image's key first (``repository`` replaces the
repository, ``tag`` the tag, ``digest`` pins ``repository@digest``), then the mirror, which replaces the registry
host of the result (for Docker Hub's implicit ``docker.io`` it is prefixed). Pull secrets are merged by name into
every pod template, each name once.

The operator reads the policy from its flags or environment (``IB_IMAGE_REGISTRY``, ``IB_IMAGE_OVERRIDES`` as
JSON, ``IB_IMAGE_PULL_SECRETS`` comma-separated; the chart sets them from ``global.imageRegistry``,
``engineImages`` and ``engineImagePullSecrets`` + ``global.imagePullSecrets``); a malformed value refuses to start
the operator with an :class:`ImagePolicyError` naming it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inference_backend.engines.image_catalog import CATALOG, DESCRIPTIONS

Json = dict[str, Any]
__all__ = ["CATALOG", "DESCRIPTIONS", "EMPTY", "ImagePolicyError", "Override", "Policy", "apply", "parse"]

REGISTRY_ENV = "IB_IMAGE_REGISTRY"
OVERRIDES_ENV = "IB_IMAGE_OVERRIDES"
PULL_SECRETS_ENV = "IB_IMAGE_PULL_SECRETS"

# The reference grammar of distribution/reference (docker/distribution reference/regexp.go), simplified to what a
# value may hold: lower-case path components, a host that has a dot or a port or is localhost.
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
HOST_RE = re.compile(rf"^{_HOST}$")
REGISTRY_RE = re.compile(rf"^{_HOST}(?:/{_COMPONENT})*$")
REPOSITORY_RE = re.compile(rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DIGEST_RE = re.compile(r"^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")
SECRET_RE = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")


class ImagePolicyError(ValueError):
    """A malformed image policy value; ``field`` names it (the chart value and the operator's environment)."""

    def __init__(self, field_: str, message: str) -> None:
        super().__init__(f"{field_}: {message}")
        self.field = field_


@dataclass(frozen=True)
class Override:
    """What replaces a pinned image's parts; None keeps the part."""

    repository: str | None = None
    tag: str | None = None
    digest: str | None = None


@dataclass(frozen=True)
class Policy:
    registry: str | None = None
    """The mirror: ``host[:port][/path]`` replacing the registry host of every image in the catalog."""
    overrides: Mapping[str, Override] = field(default_factory=dict)
    """Catalog key -> override."""
    pull_secrets: tuple[str, ...] = ()
    """Secret names added to every rendered pod template's imagePullSecrets."""

    @property
    def empty(self) -> bool:
        return self.registry is None and not self.overrides and not self.pull_secrets

    def image(self, ref: str) -> str:
        """The reference rendered for ``ref``: unchanged unless it is a catalog image."""
        key = _BY_REF.get(ref)
        if key is None:
            return ref
        host, path, tag, digest = split(ref)
        repository = f"{host}/{path}" if host else path
        o = self.overrides.get(key)
        if o is not None:
            repository = o.repository or repository
            tag = o.tag or tag
            digest = o.digest or digest
        if self.registry is not None:
            repository = mirrored(repository, self.registry)
        if digest:
            return f"{repository}@{digest}"
        return f"{repository}:{tag}" if tag else repository


EMPTY = Policy()
_BY_REF = {ref: key for key, ref in CATALOG.items()}


def split(ref: str) -> tuple[str | None, str, str | None, str | None]:
    """(registry host or None for Docker Hub's implicit one, path, tag, digest) of an image reference."""
    rest, _, digest = ref.partition("@")
    first, slash, after = rest.partition("/")
    host = None
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, rest = first, after
    name, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        name, tag = rest, ""
    return host, name, tag or None, digest or None


def mirrored(repository: str, registry: str) -> str:
    """``repository`` with its registry host replaced by ``registry`` (prefixed where the host is implicit)."""
    _, path, _, _ = split(repository)
    return f"{registry}/{path}"


def _text(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ImagePolicyError(where, f"{value!r} is not a string")
    return value


def parse(registry: str | None = None, overrides: str | None = None, pull_secrets: str | None = None) -> Policy:
    """The policy from the operator's flag or environment values; ImagePolicyError names a malformed one."""
    where = f"global.imageRegistry ({REGISTRY_ENV})"
    reg = (registry or "").strip().rstrip("/") or None
    if reg is not None and not REGISTRY_RE.match(reg):
        raise ImagePolicyError(
            where,
            f"{registry!r} is not a registry host[:port][/path] (no scheme, no tag, "
            "lower-case path), e.g. registry.example.com:5000/mirror",
        )
    parsed: dict[str, Override] = {}
    if overrides and overrides.strip():
        where = f"engineImages ({OVERRIDES_ENV})"
        try:
            raw = json.loads(overrides)
        except json.JSONDecodeError as exc:
            raise ImagePolicyError(where, f"not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ImagePolicyError(where, "must be an object of image key -> {repository, tag, digest}")
        for key, value in raw.items():
            here = f"engineImages.{key} ({OVERRIDES_ENV})"
            if key not in CATALOG:
                raise ImagePolicyError(here, f"no such image; the keys are {', '.join(CATALOG)}")
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ImagePolicyError(here, "must be an object with repository, tag and/or digest")
            unknown = sorted(set(value) - {"repository", "tag", "digest"})
            if unknown:
                raise ImagePolicyError(
                    f"engineImages.{key}.{unknown[0]} ({OVERRIDES_ENV})",
                    "unknown field; an image has repository, tag and digest",
                )
            o = Override(
                *(
                    _text(value.get(k), f"engineImages.{key}.{k} ({OVERRIDES_ENV})")
                    for k in ("repository", "tag", "digest")
                )
            )
            if o.repository is not None and not REPOSITORY_RE.match(o.repository):
                raise ImagePolicyError(
                    f"engineImages.{key}.repository ({OVERRIDES_ENV})",
                    f"{o.repository!r} is not a repository ([host[:port]/]path, lower-case, no tag or digest)",
                )
            if o.tag is not None and not TAG_RE.match(o.tag):
                raise ImagePolicyError(
                    f"engineImages.{key}.tag ({OVERRIDES_ENV})",
                    f"{o.tag!r} is not a tag (letters, digits, _ . -, at most 128)",
                )
            if o.digest is not None and not DIGEST_RE.match(o.digest):
                raise ImagePolicyError(
                    f"engineImages.{key}.digest ({OVERRIDES_ENV})",
                    f"{o.digest!r} is not a digest (sha256: and 64 lower-case hex)",
                )
            if o != Override():
                parsed[key] = o
    secrets: list[str] = []
    for name in (pull_secrets or "").split(","):
        name = name.strip()
        if not name:
            continue
        if not SECRET_RE.match(name) or len(name) > 253:
            raise ImagePolicyError(
                f"engineImagePullSecrets ({PULL_SECRETS_ENV})",
                f"{name!r} is not a Secret name (a lower-case DNS subdomain)",
            )
        if name not in secrets:
            secrets.append(name)
    return Policy(reg, parsed, tuple(secrets))


def from_env(environ: Mapping[str, str]) -> Policy:
    return parse(environ.get(REGISTRY_ENV), environ.get(OVERRIDES_ENV), environ.get(PULL_SECRETS_ENV))


def add_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """The policy's flags (``inference-backend operator`` takes their defaults from ``environ``; ``render`` from
    nothing); :func:`from_args` validates them."""
    env = environ or {}
    parser.add_argument(
        "--image-registry",
        default=env.get(REGISTRY_ENV, ""),
        help="registry mirror host[:port][/path] replacing the registry of every image the operator "
        f"picks (engines, fetch init container; env {REGISTRY_ENV})",
    )
    parser.add_argument(
        "--image-overrides",
        default=env.get(OVERRIDES_ENV, ""),
        help='JSON {"<key>": {"repository": ..., "tag": ..., "digest": "sha256:..."}} per image; '
        f"keys: {', '.join(CATALOG)} (env {OVERRIDES_ENV})",
    )
    parser.add_argument(
        "--image-pull-secrets",
        default=env.get(PULL_SECRETS_ENV, ""),
        help=f"comma-separated Secret names added to every rendered pod (env {PULL_SECRETS_ENV})",
    )


def from_args(args: argparse.Namespace) -> Policy:
    return parse(args.image_registry, args.image_overrides, args.image_pull_secrets)


def apply(pod_spec: Json, policy: Policy) -> Json:
    """``pod_spec`` with the policy applied: catalog images of its containers and init containers rewritten, the
    pull secrets merged (each name once, the ones already there first). The input is not modified."""
    if policy.empty:
        return pod_spec
    out = dict(pod_spec)
    for kind in ("initContainers", "containers"):
        if kind in out:
            out[kind] = [{**c, "image": policy.image(c["image"])} if "image" in c else c for c in out[kind]]
    if policy.pull_secrets:
        have = [dict(s) for s in out.get("imagePullSecrets") or []]
        names = {s.get("name") for s in have}
        out["imagePullSecrets"] = have + [{"name": n} for n in policy.pull_secrets if n not in names]
    return out


def rendered_images(policy: Policy = EMPTY) -> dict[str, str]:
    """Catalog key -> the reference the operator renders with ``policy`` (what an air-gapped install mirrors)."""
    return {key: policy.image(ref) for key, ref in CATALOG.items()}
