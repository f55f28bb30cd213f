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


_NOW = "2026-12-02T12:00:00Z"
_CONDITION = {
    "type": "ParityPassed",
    "status": "True",
    "observedGeneration": 3,
    "lastTransitionTime": _NOW,
    "reason": "CheckPassed",
    "message": "qwen-ab12cd34ef passed bf16-kernel",
}


def full_deployment_status() -> dict[str, Any]:
    """An InferenceDeployment status with every field set, as the controller writes it."""
    return {
        "observedGeneration": 3,
        "phase": "Stable",
        "stableRevision": "ab12cd34ef",
        "canaryRevision": "0011223344",
        "revisions": [
            {
                "hash": "ab12cd34ef",
                "engine": "vllm",
                "dtype": "bfloat16",
                "accelerator": "nvidia-gpu",
                "image": "vllm/vllm-openai:v0.32.0",
                "verdict": "Passed",
                "metrics": {"tokenMatchRate": 0.98, "meanKl": 2.5e-5},
                "parityCheck": "qwen-ab12cd34ef",
                "parityCheckUid": "6b1e0f3a-2c4d-4e5f-8a9b-0c1d2e3f4a5b",
                "parityCheckDigest": "e" * 64,
                "rejected": False,
                "message": "promoted",
                "createdAt": _NOW,
                "promotedAt": _NOW,
            }
        ],
        "conditions": [dict(_CONDITION)],
        "lastParityCheck": {
            "name": "qwen-ab12cd34ef",
            "revision": "ab12cd34ef",
            "phase": "Passed",
            "verdict": "Passed",
            "completionTime": _NOW,
        },
        "drift": {
            "revision": "ab12cd34ef",
            "run": 3,
            "check": "qwen-ab12cd34ef-drift3",
            "checkUid": "9c2d1e0f-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
            "specDigest": "f" * 64,
            "ignored": ["qwen-ab12cd34ef-drift4"],
            "lastRun": _NOW,
            "lastVerdict": "Failed",
            "lastVerdictCheck": "qwen-ab12cd34ef-drift2",
            "lastVerdictTime": _NOW,
            "running": True,
            "nextRun": _NOW,
            "message": "run qwen-ab12cd34ef-drift3 started",
        },
        "trafficMechanism": "Dark",
        "promotion": {
            "revision": "ab12cd34ef",
            "previous": "99887766aa",
            "step": "ScaleDownDelay",
            "switchedAt": _NOW,
            "scaleDownAt": _NOW,
        },
        "endpoints": {
            "stable": {"service": "qwen", "port": 8000},
            "canary": {"service": "qwen-0011223344", "port": 8000, "revision": "0011223344"},
        },
        "replicas": 3,
        "readyReplicas": 3,
        "selector": "infergate.io/deployment=qwen",
    }


def full_check_status() -> dict[str, Any]:
    """A ParityCheck status with every field set, as the controller writes it."""
    return {
        "observedGeneration": 1,
        "phase": "Failed",
        "jobName": "qwen-check-runner",
        "runnerServiceAccount": {
            "name": "qwen-check-runner",
            "uid": "0f5c2a1e-8d3b-4c6f-9e7a-2b1d4c6e8f0a",
        },
        "startTime": _NOW,
        "completionTime": _NOW,
        "profile": "bf16-kernel",
        "baselineRevision": "ab12cd34ef",
        "candidateRevision": "0011223344",
        "progress": {"done": 8, "total": 8},
        "metrics": {"tokenMatchRate": 0.5},
        "verdict": {
            "passed": False,
            "outcome": "Failed",
            "summary": "token match rate 0.5 < 0.985",
            "reasons": [
                {
                    "metric": "minTokenMatchRate",
                    "value": 0.5,
                    "threshold": 0.985,
                    "comparison": ">=",
                    "prompts": ["zh-weather"],
                    "message": "token match rate 0.5 below 0.985",
                }
            ],
            "warnings": ["meanKl near its limit"],
            "specDigest": "a" * 64,
            "generation": 1,
            "suiteDigest": "b" * 64,
        },
        "conditions": [dict(_CONDITION)],
        "reportRef": {"name": "qwen-check-report", "key": "report.json"},
    }
