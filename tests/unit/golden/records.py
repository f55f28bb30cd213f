"""Synthetic prompt records and check identities for the golden store tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from infergate.golden.keys import suite_digest
from infergate.golden.store import CheckIdentity, SideIdentity
from infergate.parity.record import PromptRecord, RecordMeta, TeacherForced, TopLogprobs
from infergate.suite import PromptSpec

VOCAB = 500
TOP_K = 5
HIDDEN = 32
STABLE = "aaaaaaaaaa"
CANARY = "bbbbbbbbbb"


def meta(revision: str, engine: str = "vllm") -> RecordMeta:
    return RecordMeta(
        engine=engine,
        engine_version="0.32.0",
        dtype="bfloat16",
        config_hash=revision,
        model="tiny-qwen",
        suite="smoke",
        effective_config={"rms_norm_eps": 1e-6},
    )


def _top(steps: int, rng: np.random.Generator) -> TopLogprobs:
    ids = rng.integers(0, VOCAB, (steps, TOP_K))
    logprobs = np.sort(np.log(rng.dirichlet(np.ones(TOP_K), steps)), axis=1)[:, ::-1]
    return TopLogprobs(ids, logprobs)


def pair(
    prompt_id: str,
    *,
    seed: int = 0,
    prompt_tokens: int = 10,
    output_tokens: int = 12,
    fork_at: int | None = None,
    hidden: int | None = HIDDEN,
) -> tuple[PromptRecord, PromptRecord]:
    """A (baseline, candidate) pair as the runner measures it: the candidate's hidden states
    on the baseline's sequence; its output differs from `fork_at` on when given."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, VOCAB, prompt_tokens)
    base_out = rng.integers(0, VOCAB, output_tokens)
    cand_out = base_out.copy()
    if fork_at is not None:
        cand_out[fork_at:] = (cand_out[fork_at:] + 1) % VOCAB
    rows = prompt_tokens + output_tokens
    base_hidden = cand_hidden = None
    if hidden is not None:
        base_hidden = rng.standard_normal((rows, hidden)).astype(np.float32)
        cand_hidden = base_hidden + 1e-3 * rng.standard_normal((rows, hidden)).astype(np.float32)
    forced = TeacherForced(
        token_ids=base_out,
        target_logprobs=np.log(rng.uniform(0.3, 0.9, output_tokens)),
        top=_top(output_tokens, rng),
    )
    baseline = PromptRecord(
        prompt_id=prompt_id,
        prompt_token_ids=prompt,
        output_token_ids=base_out,
        top_logprobs=_top(output_tokens, rng),
        hidden_states=base_hidden,
        output_text=f"baseline {prompt_id}",
        tags={"lang": "en"},
    )
    candidate = PromptRecord(
        prompt_id=prompt_id,
        prompt_token_ids=prompt,
        output_token_ids=cand_out,
        top_logprobs=_top(output_tokens, rng),
        teacher_forced=forced,
        hidden_states=cand_hidden,
        output_text=f"candidate {prompt_id}",
        tags={"lang": "en"},
    )
    return baseline, candidate


SUITE = (
    PromptSpec(id="p0", text="hello"),
    PromptSpec(id="p1", text="world"),
)
DIGEST = suite_digest(SUITE, {"maxTokens": 12, "topLogprobs": TOP_K, "seed": 42})


def check(
    *,
    namespace: str = "llm",
    deployment: str = "qwen",
    baseline: str = STABLE,
    candidate: str = CANARY,
    digest: str = DIGEST,
    **kwargs: Any,
) -> CheckIdentity:
    fingerprint = kwargs.pop("fingerprint", "sha256:f00d")
    return CheckIdentity(
        namespace=namespace,
        deployment=deployment,
        check=kwargs.pop("name", "qwen-check-1"),
        suite="smoke",
        suite_digest=digest,
        baseline=SideIdentity(baseline, fingerprint, meta(baseline)),
        candidate=SideIdentity(candidate, fingerprint, meta(candidate, "mindformers")),
    )
