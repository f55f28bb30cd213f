"""The example and invalid manifests, shared by the unit and cluster tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLES_DIR = REPO / "manifests" / "examples"
INVALID_DIR = REPO / "tests" / "integration" / "invalid"
CRDS_DIR = REPO / "crds"


@dataclass(frozen=True)
class InvalidManifest:
    """A manifest the API server must refuse, with what its message must say."""

    path: Path
    document: dict[str, Any]
    # Substrings of the API server's message (field, value, what is allowed).
    server_expects: tuple[str, ...]
    # Substring of the pydantic error for the same manifest.
    python_expects: str

    @property
    def name(self) -> str:
        return self.path.stem


def example_files() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.yaml"))


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file stem, document) for every document of every example."""
    return [
        (path.stem, document)
        for path in example_files()
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
    ]


def invalid_manifests() -> list[InvalidManifest]:
    found = []
    for path in sorted(INVALID_DIR.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        header = [line[1:].strip() for line in text.splitlines() if line.startswith("#")]
        server = tuple(
            line.removeprefix("expect:").strip() for line in header if line.startswith("expect:")
        )
        python = [
            line.removeprefix("python:").strip() for line in header if line.startswith("python:")
        ]
        if not server or len(python) != 1:
            raise AssertionError(f"{path}: needs '# expect:' lines and one '# python:' line")
        found.append(InvalidManifest(path, yaml.safe_load(text), server, python[0]))
    return found
