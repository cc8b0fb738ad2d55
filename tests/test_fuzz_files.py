"""Fuzz: `model inspect` on mutated model files (ib_testkit.file_fuzz: a GGUF, a safetensors file and a Hugging Face
directory, with bytes overwritten, huge length fields written in, or truncated). Each case gives a Model or an
InspectError naming the file, never another exception, and within seconds. IB_FUZZ_EXAMPLES sets the number of
cases (default 100); `python -m bench.fuzz_files` runs thousands in a process under resource limits and prints the
counts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from ib_testkit.file_fuzz import Mutation, apply, mutations, seeds
from inference_backend.modelinfo import InspectError, inspect_path

EXAMPLES = int(os.environ.get("IB_FUZZ_EXAMPLES", "100"))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return seeds(tmp_path_factory.mktemp("seeds"))


def test_the_seeds_are_read(seeded: dict[str, Path]) -> None:
    for path in seeded.values():
        inspect_path(path, uri="s3://bucket/model")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutation=mutations())
def test_mutated_model_files_give_a_model_or_an_error_naming_the_file(
    mutation: Mutation, seeded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = apply(mutation, seeded, tmp_path_factory.getbasetemp() / "case")
    start = time.process_time()
    try:
        inspect_path(path, uri="s3://bucket/model")
    except InspectError as exc:
        assert str(path) in str(exc), exc
    assert time.process_time() - start < 5
