"""`make experiment`'s prompt plan: which record answers which prompts."""

from __future__ import annotations

from types import ModuleType

import pytest

from infergate.suite import LONG_MAX_TOKENS, load_suite
from tests.unit.scripts import load_script


@pytest.fixture(scope="module")
def ep() -> ModuleType:
    return load_script("experiments/engine_parity.py")


def test_medium_prompts_are_neither_long_nor_short_suite_prompts(ep: ModuleType) -> None:
    medium = ep.medium_prompts(4)
    default = load_suite("default")
    assert [p.id for p in medium] == ["medium-zh-0", "medium-en-0", "medium-zh-1", "medium-en-1"]
    assert not {p.id for p in medium} & {p.id for p in default.prompts}
    for prompt in medium:
        assert not prompt.is_long
        assert prompt.max_tokens == LONG_MAX_TOKENS
        language = prompt.tags[0]
        # About 1.2K tokens: at least the target characters, at most one part more.
        assert ep.MEDIUM_CHARS[language] <= len(prompt.text) < ep.MEDIUM_CHARS[language] * 1.2
        assert prompt.text.endswith("\n")
        for long in default.select(long=True).prompts:
            assert not long.text.startswith(prompt.text[:200])


def _plan(ep: ModuleType) -> dict[str, tuple[str | None, list[str]]]:
    suite = ep.experiment_suite(4)
    return {
        name: (base, [p.id for p in prompts.prompts])
        for side in ep.SIDES
        for name, base, prompts in ep.record_plan(side, suite)
    }


def test_only_the_short_only_pair_gets_medium_prompts(ep: ModuleType) -> None:
    suite = [p.id for p in ep.experiment_suite(4).prompts]
    medium = [p.id for p in ep.medium_prompts(4)]
    short = [p.id for p in ep.experiment_suite(4).select(long=False).prompts]
    plan = _plan(ep)
    assert plan["mf16@vllm-bf16"] == ("vllm-bf16", short + medium)
    # The baseline MindFormers fp16 is forced on answers them too (and the long prompts).
    assert plan["vllm-bf16"] == (None, suite + medium)
    # Every other record answers the experiment suite unchanged.
    others = {name: ids for name, (_, ids) in plan.items()}
    del others["mf16@vllm-bf16"], others["vllm-bf16"]
    assert set(others) == {"tf32", "tf32-again@tf32", "vllm32", "vllm32@tf32",
                           "vllm-bf16@vllm32", "mf32@vllm32"}  # fmt: skip
    assert all(ids == suite for ids in others.values())


def test_every_candidate_record_is_forced_on_a_baseline_record_with_its_prompts(
    ep: ModuleType,
) -> None:
    plan = _plan(ep)
    for name, (base, ids) in plan.items():
        if base is not None:
            assert set(ids) <= set(plan[base][1]), name
