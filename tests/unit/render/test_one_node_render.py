"""A one-node deployment renders byte for byte as before `spec.topology` existed.

`one_node_render.json` holds what the code before topology rendered for every example
InferenceDeployment (manifests/examples): the revision's objects as rendered, the same
objects owned and stamped as the operator writes them (their desired-hash and
revision-spec annotations included), and the revision hash. Any difference would move
every running deployment to a new revision, or rewrite its objects, on upgrade.

The objects were recorded again, the hashes kept, when engine pods gained their Pod
Security settings, cache home and spread (render/pod_security.py, render/disruption.py):
an upgrade to that version rolls each engine Deployment's pods once, in place, with no
new revision and no check (docs/upgrade.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.api import InferenceDeploymentSpec
from infergate.plan.deployment.desired import Owner, desired_revision
from infergate.render import render_revision
from tests.unit.api.manifests import example_files

_BEFORE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "one_node_render.json").read_text(encoding="utf-8")
)
# Ways to say "one node" that must all render as if topology were not there.
_ONE_NODE: dict[str, dict[str, Any] | None] = {
    "unset": None,
    "empty": {},
    "nodes-1": {"nodes": 1},
    "all-defaults": {
        "nodes": 1,
        "pipelineParallelSize": 1,
        "dataParallelSize": 1,
        "expertParallel": False,
    },
}


def _examples() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in example_files():
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if document and document.get("kind") == "InferenceDeployment":
                key = f"{path.stem}/{index}"
                if key in _BEFORE:
                    found.append((key, document["metadata"]["name"], document["spec"]))
    return found


def _dump(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)


def test_every_recorded_example_is_still_an_example() -> None:
    assert {key for key, _, _ in _examples()} == set(_BEFORE)


@pytest.mark.parametrize("say", list(_ONE_NODE))
@pytest.mark.parametrize(("key", "name", "spec"), _examples(), ids=lambda v: str(v)[:30])
def test_one_node_renders_byte_identical(
    say: str, key: str, name: str, spec: dict[str, Any]
) -> None:
    document = copy.deepcopy(spec)
    if _ONE_NODE[say] is not None:
        document["topology"] = _ONE_NODE[say]
    parsed = InferenceDeploymentSpec.model_validate(document)
    rendered = render_revision(name, "llm", parsed)
    owned = desired_revision(Owner(name, "llm", "uid-1"), parsed, replicas=1, role="canary")
    before = _BEFORE[key]
    assert rendered.revision_hash == before["hash"]
    assert _dump(rendered.manifests()) == _dump(before["rendered"])
    assert _dump(owned.manifests()) == _dump(before["owned"])
