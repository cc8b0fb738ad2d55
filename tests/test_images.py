"""The image policy (inference_backend.images): a registry mirror, per-image overrides and pull secrets, applied by
render to every pod template, and validated before the operator starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ib_testkit.golden import INPUTS, decide, render_text
from inference_backend import images
from inference_backend.engines import REGISTRY
from inference_backend.engines.artifacts import OPERATOR_IMAGE
from inference_backend.engines.image_catalog import PICKER_IMAGE
from inference_backend.render import render_result, to_yaml
from inference_backend.vocabulary import SPEC_HASH

CASES = sorted(INPUTS.glob("*.yaml"))
DIGEST = "sha256:" + "ab" * 32
MIRROR = "mirror.example.com:5000/proxy"


def _templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for o in objects:
        if o["kind"] == "Deployment":
            out.append(o["spec"]["template"])
        elif o["kind"] == "LeaderWorkerSet":
            lwt = o["spec"]["leaderWorkerTemplate"]
            out += [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return out


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _render(path: Path, policy: images.Policy) -> list[dict[str, Any]]:
    ib, decision = decide(path)
    return list(render_result(ib, decision, image_policy=policy).objects)  # type: ignore[arg-type]


def test_the_catalog_holds_every_image_an_engine_card_names() -> None:
    named = {ref for c in REGISTRY for ref in (*c.images.values(), *c.devices.values())}
    assert named | {OPERATOR_IMAGE, PICKER_IMAGE} == set(images.CATALOG.values())
    assert len(set(images.CATALOG.values())) == len(images.CATALOG), "one key per image"
    assert set(images.DESCRIPTIONS) == set(images.CATALOG)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_image_rendered_is_in_the_catalog_or_the_users(path: Path) -> None:
    """No image the operator picks escapes the policy: each rendered container image is a catalog image, or one the
    user wrote (spec.engine.image)."""
    ib, _ = decide(path)
    own = ib.spec.engine.image  # type: ignore[attr-defined]
    for tpl in _templates(_render(path, images.EMPTY)):
        for c in _containers(tpl):
            assert c["image"] in images.CATALOG.values() or c["image"] == own, c["image"]


def test_split_and_mirror_every_catalog_image() -> None:
    assert images.split("vllm/vllm-openai:v1") == (None, "vllm/vllm-openai", "v1", None)
    assert images.split("localhost:5000/a/b@" + DIGEST) == ("localhost:5000", "a/b", None, DIGEST)
    assert images.split("ghcr.io/ggml-org/llama.cpp:server-b1") == ("ghcr.io", "ggml-org/llama.cpp", "server-b1", None)
    policy = images.parse(MIRROR)
    for key, ref in images.CATALOG.items():
        _, path, tag, _ = images.split(ref)
        assert policy.image(ref) == f"{MIRROR}/{path}:{tag}", key
    assert policy.image("registry.example.com/mine:1") == "registry.example.com/mine:1", "a user's image is kept"


def test_overrides_repository_tag_and_digest() -> None:
    key, ref = "llamacppCpu", images.CATALOG["llamacppCpu"]
    _, path, tag, _ = images.split(ref)
    p = images.parse(overrides=json.dumps({"llamacppCpu": {"digest": DIGEST}}))
    assert p.image(ref) == f"ghcr.io/{path}@{DIGEST}", "a digest pins repo@sha256:..., the tag dropped"
    p = images.parse(overrides='{"llamacppCpu": {"repository": "internal.example.com/llama", "tag": "b9"}}')
    assert p.image(ref) == "internal.example.com/llama:b9"
    p = images.parse(MIRROR, json.dumps({"vllm": {"repository": "team/vllm", "digest": DIGEST}}))
    assert p.image(images.CATALOG["vllm"]) == f"{MIRROR}/team/vllm@{DIGEST}", "override first, then the mirror"
    assert p.image(images.CATALOG[key]) == f"{MIRROR}/{path}:{tag}", "the other images only mirrored"


def test_pull_secrets_are_merged_not_duplicated() -> None:
    p = images.parse(pull_secrets="regcred, mirror-cred,regcred")
    assert p.pull_secrets == ("regcred", "mirror-cred")
    spec = {"containers": [{"name": "x", "image": "a/b:1"}], "imagePullSecrets": [{"name": "mirror-cred"}]}
    out = images.apply(spec, p)
    assert out["imagePullSecrets"] == [{"name": "mirror-cred"}, {"name": "regcred"}]
    assert images.apply(out, p) == out, "applying twice changes nothing"
    assert spec["imagePullSecrets"] == [{"name": "mirror-cred"}], "the input is not modified"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_policy_reaches_every_pod_template(path: Path) -> None:
    ib, _ = decide(path)
    own = ib.spec.engine.image  # type: ignore[attr-defined]
    digests = {key: {"digest": DIGEST} for key in ("fetch", "vllm", "llamacppCpu", "pytorch")}
    policy = images.parse(MIRROR, json.dumps(digests), "regcred")
    plain = _templates(_render(path, images.EMPTY))
    ruled = _templates(_render(path, policy))
    assert len(plain) == len(ruled) >= 1
    for before, after in zip(plain, ruled, strict=True):
        assert after["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        for b, a in zip(_containers(before), _containers(after), strict=True):
            if b["image"] == own:
                assert a["image"] == own, "the user's image is the user's"
                continue
            key = {v: k for k, v in images.CATALOG.items()}[b["image"]]
            assert a["image"].startswith(MIRROR + "/"), (key, a["image"])
            assert a["image"].endswith("@" + DIGEST) == (key in digests), (key, a["image"])
        hashes = [t["metadata"]["annotations"][SPEC_HASH] for t in (before, after)]
        assert hashes[0] != hashes[1], "the hash covers the images, so changing the policy rolls the pods"


def test_leader_and_worker_templates_of_a_leaderworkerset() -> None:
    path = INPUTS / "vllm-405b-multinode.yaml"
    (lws,) = [o for o in _render(path, images.parse(MIRROR, "", "regcred")) if o["kind"] == "LeaderWorkerSet"]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], role
        assert all(c["image"].startswith(MIRROR + "/vllm/vllm-openai:") for c in _containers(lwt[role])), role


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_an_empty_policy_renders_the_golden_files(path: Path) -> None:
    assert images.parse("", "", "") == images.EMPTY
    ib, decision = decide(path)
    text = render_text(path)
    body = to_yaml(list(render_result(ib, decision, image_policy=images.parse("", "{}", " ")).objects))  # type: ignore[arg-type]
    assert text.endswith(body)


@pytest.mark.parametrize(
    ("registry", "overrides", "secrets", "field", "says"),
    [
        ("https://mirror.example.com", "", "", "global.imageRegistry (IB_IMAGE_REGISTRY)", "no scheme"),
        ("mirror.example.com/Upper", "", "", "global.imageRegistry", "registry host"),
        ("mirror.example.com:5000/x:tag", "", "", "global.imageRegistry", "registry host"),
        ("", '{"vllm": {"digest": "sha256:abc"}}', "", "engineImages.vllm.digest (IB_IMAGE_OVERRIDES)", "'sha256:abc'"),
        ("", json.dumps({"vllm": {"digest": DIGEST.upper()}}), "", "engineImages.vllm.digest", "not a digest"),
        ("", '{"vllm": {"tag": "a b"}}', "", "engineImages.vllm.tag", "not a tag"),
        ("", '{"vllm": {"repository": "x/y:1"}}', "", "engineImages.vllm.repository", "not a repository"),
        ("", '{"vlm": {"tag": "1"}}', "", "engineImages.vlm", "no such image"),
        ("", '{"vllm": {"tga": "1"}}', "", "engineImages.vllm.tga", "unknown field"),
        ("", '{"vllm": {"tag": 1}}', "", "engineImages.vllm.tag", "not a string"),
        ("", "{vllm", "", "engineImages (IB_IMAGE_OVERRIDES)", "not JSON"),
        ("", '["vllm"]', "", "engineImages", "must be an object"),
        ("", "", "ok,Bad_Name", "engineImagePullSecrets (IB_IMAGE_PULL_SECRETS)", "'Bad_Name'"),
    ],
)
def test_malformed_values_are_refused_naming_the_value(
    registry: str, overrides: str, secrets: str, field: str, says: str
) -> None:
    with pytest.raises(images.ImagePolicyError) as exc:
        images.parse(registry, overrides, secrets)
    assert str(exc.value).startswith(field) and says in str(exc.value), str(exc.value)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_backend.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def test_the_operator_refuses_to_start_with_a_malformed_policy() -> None:
    """Before kopf starts (no cluster is contacted): the environment the chart sets, then the flag."""
    res = _cli("operator", env={"IB_IMAGE_OVERRIDES": '{"fetch": {"digest": "sha256:0"}}'})
    assert res.returncode == 2, res.stderr
    assert "invalid image policy: engineImages.fetch.digest (IB_IMAGE_OVERRIDES)" in res.stderr
    res = _cli("operator", "--image-registry", "oci://mirror")
    assert res.returncode == 2 and "global.imageRegistry" in res.stderr, res.stderr


def test_render_takes_the_operators_flags() -> None:
    path = INPUTS / "llamacpp-cpu-draft.yaml"
    root = Path(__file__).resolve().parents[1]
    inputs = [
        "-f",
        str(path),
        "--nodes",
        str(root / "docs/examples/nodes/cpu-only.yaml"),
        "--models",
        str(root / "docs/examples/models.yaml"),
    ]
    res = _cli("render", *inputs, "--image-registry", MIRROR, "--image-pull-secrets", "regcred")
    assert res.returncode == 0, res.stderr
    assert f"image: {MIRROR}/ggml-org/llama.cpp:server-" in res.stdout and "- name: regcred" in res.stdout
    res = _cli("render", *inputs, "--image-overrides", '{"x": {}}')
    assert res.returncode != 0 and "engineImages.x" in res.stderr
