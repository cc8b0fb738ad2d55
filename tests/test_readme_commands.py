"""Every command the README shows is run by a test or by the demo.

RUN_BY maps each command (as ib_testkit.readme.commands reads it from the ```sh blocks) to the file that runs it and
a line of that file that does; a new command in the README without an entry fails here, and so does an entry whose
runner no longer holds the line. The Install and model-inspect commands are read from the README itself by
e2e/test_install.py and run against the real API server, so those cannot drift either.
"""

from __future__ import annotations

import tomllib

from ib_testkit import ROOT
from ib_testkit.readme import commands

INSTALL_TEST = ("e2e/test_install.py", 'install = [c for c in commands(section("Install")) if OCI not in c]')
RUN_BY: dict[str, tuple[str, str]] = {
    "make demo": ("Makefile", "demo: venv\n\tPY=$(PY) hack/demo"),
    "make test": (".ci/run", "\nmake test\n"),
    "kubectl apply --server-side -f charts/inference-backend/crds/": INSTALL_TEST,
    "helm install ib charts/inference-backend --namespace ib-system --create-namespace --skip-crds": INSTALL_TEST,
    # The OCI reference: e2e/test_install.py installs the package the release workflow's `helm package` makes, with
    # the README's command; the push to and the pull from ghcr.io run in the release workflow only.
    "helm install ib oci://ghcr.io/inference-backend/charts/inference-backend --version 0.1.0 --namespace ib-system "
    "--create-namespace --skip-crds": ("e2e/test_install.py", "run(oci.replace(OCI, str(package)))"),
    "inference-backend select -f docs/examples/vllm-llama-3-1-8b.yaml --nodes docs/examples/nodes/h100x8.yaml "
    "--models docs/examples/models.yaml": (
        "tests/test_cli.py",
        '"select",\n        "-f",\n        "docs/examples/vllm-llama-3-1-8b.yaml",\n        "--nodes",\n'
        '        "docs/examples/nodes/h100x8.yaml",\n        "--models",\n        MODELS,',
    ),
    # make venv installs the checkout with the dev extra, which includes inspect (checked below).
    "pip install '.[inspect]'": ("Makefile", "pip install -q -e '.[dev,operator,fetch]'"),
    "inference-backend model inspect ./Mixtral-8x7B-v0.1 --uri hf://mistralai/Mixtral-8x7B-v0.1 '>' mixtral.yaml": (
        "e2e/test_install.py",
        'commands(section("Model facts from the artifact"))',
    ),
    "kubectl apply -f mixtral.yaml": ("e2e/test_install.py", 'assert apply == "kubectl apply -f mixtral.yaml"'),
}


def test_every_readme_command_has_a_runner() -> None:
    missing = [c for c in commands() if c not in RUN_BY]
    assert not missing, f"README commands that no test or demo runs (add one, then an entry in RUN_BY): {missing}"


def test_no_stale_entries() -> None:
    shown = set(commands())
    assert not [c for c in RUN_BY if c not in shown], "RUN_BY names commands the README no longer shows"


def test_each_runner_runs_its_command() -> None:
    for command, (path, line) in RUN_BY.items():
        assert line in (ROOT / path).read_text(), f"{path} no longer runs `{command}` (expected: {line!r})"


def test_the_dev_extra_includes_inspect() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert "inference-backend[inspect]" in dev
