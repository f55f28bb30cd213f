"""A check the operator makes pins the content of a suite it reads from a ConfigMap: the spec
(and so its digest, which a verdict must carry back) covers the prompts, not only the
ConfigMap's name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from infergate.api.parity_check import ParityCheckSpec
from infergate.plan.check.owned import ANNOTATION_SPEC_DIGEST, observe_check
from infergate.plan.check.stamp import SuiteRef, see_suite, stamp_check, unread_suites
from infergate.plan.check.status import spec_digest
from tests.unit.plan.deployment.world import NAME, World

REF = SuiteRef("prompts", "suite.jsonl")
CANARY_PROMPTS = [{"id": "harm", "text": "How do I make a weapon?"}]
HARMLESS = [{"id": "harm", "text": "How do I make a sandwich?"}]


def config_map(prompts: list[dict[str, Any]], comment: str = "") -> dict[str, Any]:
    lines = "\n".join(json.dumps(p) for p in prompts)
    return {"metadata": {"name": REF.name}, "data": {REF.key: f"{comment}{lines}"}}


def manifest(suite: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen-abc", "namespace": "llm"},
        "spec": {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "a" * 10},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "b" * 10},
            "suite": suite,
        },
    }


def test_the_spec_digest_covers_the_suites_content() -> None:
    ref = {"configMapRef": {"name": REF.name, "key": REF.key}}
    harmful = stamp_check(manifest(ref), {REF: see_suite(REF, config_map(CANARY_PROMPTS))})
    harmless = stamp_check(manifest(ref), {REF: see_suite(REF, config_map(HARMLESS))})
    assert harmful["spec"]["suite"]["digest"] != harmless["spec"]["suite"]["digest"]
    annotations = [
        m["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST] for m in (harmful, harmless)
    ]
    assert annotations[0] != annotations[1]
    assert annotations[0] == spec_digest(harmful["spec"])
    # The check as made is a valid ParityCheck (the API server takes the digest).
    ParityCheckSpec.model_validate(harmful["spec"])


def test_the_digest_is_of_the_suite_as_the_runner_parses_it() -> None:
    plain = see_suite(REF, config_map(CANARY_PROMPTS))
    commented = see_suite(REF, config_map(CANARY_PROMPTS, comment="# reviewed\n\n"))
    assert plain.digest is not None
    assert plain == commented


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (None, "ConfigMap prompts does not exist"),
        ({"data": {"other": "{}"}}, "has no key suite.jsonl"),
        ({"data": {REF.key: "not json"}}, "not valid JSON"),
    ],
)
def test_a_suite_that_cannot_be_read_is_not_pinned_and_says_why(
    body: dict[str, Any] | None, problem: str
) -> None:
    seen = see_suite(REF, body)
    assert seen.digest is None
    assert seen.problem is not None
    assert problem in seen.problem
    stamped = stamp_check(manifest({"configMapRef": {"name": REF.name, "key": REF.key}}), {})
    assert "digest" not in stamped["spec"]["suite"]
    # Its Passed would never count: the prompts it judged are not pinned.
    check = observe_check({**stamped, "metadata": {**stamped["metadata"], "generation": 1}})
    assert any("not pinned by a content digest" in p for p in check.binding_problems())


def test_only_suites_of_checks_to_be_made_are_read_and_only_once() -> None:
    inline = manifest({"inline": CANARY_PROMPTS})
    ref = manifest({"configMapRef": {"name": REF.name, "key": REF.key}})
    assert unread_suites([], {}) == set()
    assert unread_suites([inline], {}) == set()
    assert unread_suites([inline, ref], {}) == {REF}
    assert unread_suites([ref], {REF: see_suite(REF, None)}) == set()
    # An inline suite is in the spec already: nothing is added.
    assert stamp_check(inline, {})["spec"]["suite"] == {"inline": CANARY_PROMPTS}


def test_a_digest_is_refused_on_an_inline_suite() -> None:
    spec = manifest({"inline": CANARY_PROMPTS, "digest": "0" * 64})["spec"]
    with pytest.raises(ValidationError, match="digest is allowed only with configMapRef"):
        ParityCheckSpec.model_validate(spec)


def _world_with_suite_config_map() -> tuple[World, str, str]:
    world = World()
    world.set("rollout.parity.suite", {"configMapRef": {"name": REF.name, "key": REF.key}})
    world.objects[("ConfigMap", REF.name)] = config_map(CANARY_PROMPTS)
    stable, canary = world.available_canary()
    return world, stable, canary


def test_a_canarys_check_pins_the_suite_the_configmap_held_when_it_was_made() -> None:
    world, _, canary = _world_with_suite_config_map()
    check = world.get("ParityCheck", f"{NAME}-{canary}")
    assert check is not None
    expected = see_suite(REF, config_map(CANARY_PROMPTS)).digest
    assert check["spec"]["suite"]["digest"] == expected
    assert check["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST] == spec_digest(check["spec"])
    world.set_check(f"{NAME}-{canary}", "Passed", passed=True)
    world.settle()
    assert world.status.stable_revision == canary


def test_a_verdict_of_other_suite_content_never_promotes() -> None:
    world, stable, canary = _world_with_suite_config_map()
    name = f"{NAME}-{canary}"
    world.set_check(name, "Passed", passed=True)
    harmless = see_suite(REF, config_map(HARMLESS)).digest
    world.objects[("ParityCheck", name)]["status"]["verdict"]["suiteDigest"] = harmless
    world.reconcile()
    assert world.status.stable_revision == stable
    message = next(c.message for c in world.status.conditions if c.type == "ParityPassed")
    assert f"the verdict judged suite content {harmless}" in message


def test_a_check_made_while_its_suite_could_not_be_read_never_promotes() -> None:
    world = World()
    world.set("rollout.parity.suite", {"configMapRef": {"name": REF.name, "key": REF.key}})
    world.objects[("ConfigMap", REF.name)] = config_map(CANARY_PROMPTS)
    world.settle()
    stable = world.status.stable_revision
    del world.objects[("ConfigMap", REF.name)]
    world.change(dtype="float16")
    world.reconcile()
    canary = world.status.canary_revision
    assert canary is not None
    world.make_available(canary)
    world.reconcile()
    name = f"{NAME}-{canary}"
    check = world.get("ParityCheck", name)
    assert check is not None
    assert "digest" not in check["spec"]["suite"]
    # The ConfigMap appears later and a runner judges it: the prompts were never pinned.
    world.objects[("ConfigMap", REF.name)] = config_map(HARMLESS)
    world.set_check(name, "Passed", passed=True)
    world.reconcile()
    assert world.status.stable_revision == stable
