"""Each stratum of prompts (short text, long text, chats) has its own figures."""

from __future__ import annotations

import pytest

from infergate.parity.compare import compare_sources
from infergate.parity.record import PromptRecord

from .builders import candidate_of, replace, scored_record, scored_suite
from .test_decode import _thresholds


def _chat(p: PromptRecord) -> PromptRecord:
    return replace(p, tags={"chat": "true", "en": "true"})


def test_chats_are_a_stratum_of_their_own() -> None:
    prompts = scored_suite(n=32, long=4)
    # The first 8 short prompts are chats; only they differ on the candidate.
    prompts = [_chat(p) if i < 8 else p for i, p in enumerate(prompts)]
    candidate = [candidate_of(p, shift=0.05 if "chat" in p.tags else 0.0) for p in prompts]
    result = compare_sources(scored_record(prompts), scored_record(candidate), _thresholds())
    strata = result.metrics.strata
    assert set(strata) == {"short", "chat", "long"}
    assert strata["chat"]["meanKl"].evidence == 8
    assert strata["short"]["meanKl"].evidence == 24
    assert strata["long"]["meanKl"].evidence == 4
    chat_kl, short_kl = strata["chat"]["meanKl"].value, strata["short"]["meanKl"].value
    assert chat_kl is not None
    assert short_kl == pytest.approx(0.0, abs=1e-12)
    assert chat_kl > 0.0
    # Every stratum's bound is found as the suite's is (prompt-clustered).
    assert strata["chat"]["meanKl"].upper is not None
    assert strata["chat"]["meanKl"].upper >= chat_kl
    # The suite's own figure weighs each prompt the same across strata.
    suite_kl = result.metrics.estimates["meanKl"].value
    assert suite_kl == pytest.approx(chat_kl * 8 / 36, rel=1e-9)
