"""The parity gate on real engines (CPU): vLLM, MindFormers and transformers servers.

Every server runs from its engine venv and is driven over HTTP by `infergate record
--url`, the client code the parity runner uses; verdicts come from the parity core.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from infergate.cli import main
from infergate.engines.client import parse_completion_choice, parse_prompt_logprobs
from infergate.engines.launch import EngineServer
from infergate.parity.compare import compare_sources
from infergate.parity.metrics import ParityResult
from infergate.parity.profiles import plan_gate
from infergate.parity.record import PromptRecord
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import Verdict, VerdictStatus, decide
from infergate.recordio import RecordReader
from infergate.suite import load_suite
from tests.engines.conftest import EngineFarm

pytestmark = pytest.mark.engines

MODEL = "fixture"


def _short_suite(tmp_path: Path) -> str:
    """The smoke suite without its long prompt, as a suite file (for MindFormers on CPU)."""
    path = tmp_path / "smoke-short.jsonl"
    prompts = load_suite("smoke").select(long=False).prompts
    lines = [json.dumps(p.model_dump(by_alias=True, exclude_none=True)) for p in prompts]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _record(
    model: Path,
    server: EngineServer,
    out: Path,
    *,
    suite: str = "smoke",
    probe: EngineServer | None = None,
    baseline: Path | None = None,
    hidden: bool = True,
) -> RecordReader:
    spec = server.spec
    argv = [
        "record", "--engine", spec.engine, "--model", str(model), "--dtype", spec.dtype,
        "--suite", suite, "--out", str(out), "--url", server.url,
        "--served-model-name", MODEL, "--max-tokens", "24", "--long-max-tokens", "8",
    ]  # fmt: skip
    for key, value in spec.overrides.items():
        argv += ["--config", f"{key}={value}"]
    if probe is not None:
        argv += ["--probe-url", probe.url]
    if baseline is not None:
        argv += ["--teacher-forced-from", str(baseline)]
    if not hidden:
        argv.append("--no-hidden-states")
    assert main(argv) == 0
    return RecordReader(out)


def _judge(
    baseline: RecordReader, candidate: RecordReader, profile: ProfileName, *, hidden: bool = True
) -> tuple[Verdict, ParityResult]:
    gate = plan_gate(baseline.meta, candidate.meta, profile=profile, hidden_states=hidden)
    result = compare_sources(
        baseline, candidate, gate.thresholds, gate.expected_differences, disabled=gate.disabled
    )
    return decide(result, gate.warn), result


def _failed_checks(verdict: Verdict) -> set[str]:
    return {check.key for check in verdict.checks if check.outcome == "fail"}


@pytest.mark.timeout(2400)  # two records of the 38-prompt default suite; slow on a busy CPU
def test_identical_vllm_config_passes_its_profile(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    server = engines.server("vllm", "bfloat16")
    pooling = engines.server("vllm", "bfloat16", probe=True)
    # The default suite: enough prompts, long prompts and scored positions for the profile.
    base = _record(fixture_model, server, tmp_path / "base", suite="default", probe=pooling)
    cand = _record(
        fixture_model, server, tmp_path / "cand", suite="default", probe=pooling,
        baseline=base.path,
    )  # fmt: skip

    verdict, result = _judge(base, cand, ProfileName.BF16_KERNEL)

    assert verdict.status == VerdictStatus.PASSED, verdict.reasons
    assert result.metrics.tokens.match_rate.value == 1.0
    assert result.metrics.evidence is not None
    assert result.metrics.evidence.long_prompts == 4
    # Long prompts are scored at their own positions: the 0-1K and 8K+ buckets hold steps.
    buckets = {b.name: b for b in result.metrics.buckets}
    assert buckets["0-1K"].kl_steps > 0
    assert buckets["8K+"].kl_steps > 0
    assert result.metrics.hidden is not None
    assert result.metrics.hidden.cosine_p1 == pytest.approx(1.0, abs=1e-6)
    long_prompt = base.get("long-zh-0")
    assert long_prompt.prompt_token_ids.shape[0] >= 8192
    assert long_prompt.hidden_states is not None
    assert long_prompt.hidden_states.shape == (long_prompt.prompt_token_ids.shape[0] + 8, 128)
    assert base.meta.fingerprints["suite.digest"] == load_suite("default").digest()
    assert base.meta.fingerprints["weights.digest"] == cand.meta.fingerprints["weights.digest"]


def test_transformers_and_mindformers_fp32_pass_cross_framework(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    suite = _short_suite(tmp_path)
    reference = engines.server("transformers", "float32")
    mindformers = engines.server("mindformers", "float32")
    base = _record(fixture_model, reference, tmp_path / "tf", suite=suite)
    cand = _record(fixture_model, mindformers, tmp_path / "mf", suite=suite, baseline=base.path)

    verdict, result = _judge(base, cand, ProfileName.FP32_CROSS_FRAMEWORK)

    # Four short prompts are below the fp32 profile's minimum evidence (MindFormers on CPU
    # is too slow for more here): nothing fails, and the verdict says what is missing.
    assert verdict.status == VerdictStatus.INCONCLUSIVE, verdict.reasons
    assert not _failed_checks(verdict)
    assert verdict.reasons[0].startswith("not enough evidence: 4 of 32 prompts needed")
    decided = {c.key: c.outcome for c in verdict.checks}
    assert decided["maxMeanKl"] == "pass"
    assert decided["maxHiddenMaxAbsErr"] == "pass"
    assert result.metrics.tokens.match_rate.value == 1.0
    assert cand.meta.engine_version.startswith("mindformers 1.9.0 / mindspore 2.9.0")
    # Both adapters load the same files: every fingerprint but the versions agrees.
    differing = {
        k for k in base.meta.fingerprints
        if base.meta.fingerprints[k] != cand.meta.fingerprints.get(k)
    }  # fmt: skip
    assert differing <= {"engine.kind", "versions.engine", "versions.framework",
                         "versions.transformers", "versions.tokenizers"}  # fmt: skip


def test_changed_norm_epsilon_is_caught(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    base = _record(fixture_model, engines.server("transformers", "float32"), tmp_path / "base")
    changed = engines.server("transformers", "float32", overrides={"rms_norm_eps": 1e-5})
    cand = _record(fixture_model, changed, tmp_path / "cand", baseline=base.path)

    verdict, _ = _judge(base, cand, ProfileName.FP32_CROSS_FRAMEWORK)

    assert verdict.status == VerdictStatus.FAILED
    assert any("rms_norm_eps: 1e-06 -> 1e-05" in reason for reason in verdict.reasons)
    assert any(
        "FingerprintDiffers" in r and "model_config.rms_norm_eps: 1e-06 (baseline) / 1e-05" in r
        for r in verdict.reasons
    )
    # The numbers show it too, not only the configuration diff.
    assert {"maxHiddenRelL2P99", "minHiddenCosineP1"} & _failed_checks(verdict)
    assert any(r.startswith(("maxHiddenRelL2P99", "minHiddenCosineP1")) for r in verdict.reasons)


def test_changed_rope_theta_is_caught_and_grows_with_position(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    base = _record(fixture_model, engines.server("transformers", "float32"), tmp_path / "base")
    changed = engines.server("transformers", "float32", overrides={"rope_theta": 10000.0})
    cand = _record(fixture_model, changed, tmp_path / "cand", baseline=base.path)

    verdict, result = _judge(base, cand, ProfileName.FP32_CROSS_FRAMEWORK)

    assert verdict.status == VerdictStatus.FAILED
    assert "maxHiddenRelL2P99" in _failed_checks(verdict)
    assert any(r.startswith("maxHiddenRelL2P99") for r in verdict.reasons)
    # The rope signature: no rotation at position 0, so the states agree there and
    # drift from the next position on.
    for prompt_id in ("zh-rain", "long-zh-0"):
        a = base.get(prompt_id).hidden_states
        b = cand.get(prompt_id).hidden_states
        assert a is not None
        assert b is not None
        rel = np.linalg.norm(a - b, axis=1) / np.linalg.norm(a, axis=1)
        assert rel[0] < 1e-5
        assert rel[1:].mean() > 1e-2
    assert result.metrics.long_sequence.prompts == 1


def test_float16_where_bfloat16_was_pinned_is_caught(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    pinned = engines.server("vllm", "bfloat16")
    drifted = engines.server("vllm", "float16")
    base = _record(fixture_model, pinned, tmp_path / "base", hidden=False)
    cand = _record(fixture_model, drifted, tmp_path / "cand", baseline=base.path, hidden=False)

    verdict, _ = _judge(base, cand, ProfileName.BF16_KERNEL, hidden=False)

    assert verdict.status == VerdictStatus.FAILED
    assert any(
        "ConfigDiffers" in r and "dtype: 'bfloat16' -> 'float16'" in r for r in verdict.reasons
    ), verdict.reasons


def test_mindformers_and_vllm_answers_parse_into_the_same_record_shape(
    engines: EngineFarm, tmp_path: Path
) -> None:
    vllm = engines.server("vllm", "bfloat16")
    mindformers = engines.server("mindformers", "float32")
    prompt = httpx.post(
        f"{vllm.url}/tokenize", json={"model": MODEL, "prompt": "今天早上下了一场小雨"}
    ).json()["tokens"]
    request = {
        "model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0, "seed": 42,
        "logprobs": 4, "ignore_eos": True, "return_tokens_as_token_ids": True,
    }  # fmt: skip
    scoring = {**request, "max_tokens": 1, "logprobs": None, "prompt_logprobs": 4}
    records = []
    for server in (vllm, mindformers):
        answer = httpx.post(f"{server.url}/v1/completions", json=request, timeout=120).json()
        assert answer["object"] == "text_completion"
        assert answer["usage"]["prompt_tokens"] == len(prompt)
        assert answer["usage"]["completion_tokens"] == 6
        completion = parse_completion_choice(answer["choices"][0], prompt, 4)
        scored = httpx.post(f"{server.url}/v1/completions", json=scoring, timeout=120).json()
        forced = parse_prompt_logprobs(scored["choices"][0]["prompt_logprobs"], prompt, 1, 4)
        records.append(
            PromptRecord(
                prompt_id="zh-rain",
                prompt_token_ids=np.asarray(completion.prompt_token_ids),
                output_token_ids=np.asarray(completion.token_ids),
                top_logprobs=completion.top,
                teacher_forced=forced,
                output_text=completion.text,
            )
        )
    a, b = records
    assert a.prompt_token_ids.tolist() == b.prompt_token_ids.tolist() == prompt
    assert a.output_token_ids.shape == b.output_token_ids.shape == (6,)
    assert a.top_logprobs.token_ids.shape == b.top_logprobs.token_ids.shape == (6, 4)
    assert a.teacher_forced is not None
    assert b.teacher_forced is not None
    assert a.teacher_forced.top.token_ids.shape == b.teacher_forced.top.token_ids.shape
    assert a.teacher_forced.target_logprobs.shape == (len(prompt) - 1,)
    assert isinstance(a.output_text, str)
    assert isinstance(b.output_text, str)


def test_text_reaches_every_engine_through_its_own_tokenizer(engines: EngineFarm) -> None:
    """The same text gives the same prompt ids on vLLM and the adapter, special tokens and all."""
    from infergate.engines.client import EngineClient

    text = "今天早上下了一场小雨，"  # noqa: RUF001 - Chinese punctuation
    ids = []
    for engine, dtype in (("vllm", "bfloat16"), ("transformers", "float32")):
        with EngineClient(engines.server(engine, dtype).url, MODEL) as client:
            answer = client.complete(text, max_tokens=2, top_logprobs=2, seed=42)
            assert answer.prompt_token_ids == client.tokenize(text)
            ids.append(answer.prompt_token_ids)
    assert ids[0] == ids[1]


def test_a_two_percent_final_norm_scale_fails_at_bf16(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    """Cosine is exactly 1 and tokens barely move: the norm ratio and fingerprints see it."""
    import shutil

    import safetensors.numpy

    from infergate.engines.launch import EngineServer, ServerSpec

    scaled = tmp_path / "scaled"
    shutil.copytree(fixture_model, scaled)
    weights = safetensors.numpy.load_file(str(scaled / "model.safetensors"))
    weights["model.norm.weight"] = weights["model.norm.weight"] * np.float32(1.02)
    safetensors.numpy.save_file(weights, str(scaled / "model.safetensors"))
    suite = _short_suite(tmp_path)
    base = _record(
        fixture_model, engines.server("transformers", "bfloat16"), tmp_path / "b", suite=suite
    )
    spec = ServerSpec("transformers", scaled, "bfloat16")
    with EngineServer(spec, tmp_path / "scaled.log").start(timeout=600) as server:
        cand = _record(scaled, server, tmp_path / "c", suite=suite, baseline=base.path)

    verdict, result = _judge(base, cand, ProfileName.BF16_KERNEL)

    assert verdict.status == VerdictStatus.FAILED
    assert "maxHiddenNormLogRatio" in _failed_checks(verdict)
    ratio = result.metrics.estimates["hiddenNormLogRatio"].value
    assert ratio == pytest.approx(np.log(1.02), rel=0.05)
    assert any("weights.digest" in r for r in verdict.reasons)
    # The check carries its own positive control: the same change computed from the
    # baseline's records, scored through the same limits. It fails where the real change
    # does, and the suite's minimum detectable effect is no larger than the change.
    control = result.control
    assert control is not None
    assert control.detected
    assert "maxHiddenNormLogRatio" in control.failed
    assert control.minimum_detectable is not None
    assert control.minimum_detectable <= 0.02


def test_the_fixtures_chats_render_alike_on_vllm_and_the_adapter_and_form_a_stratum(
    engines: EngineFarm, fixture_model: Path, tmp_path: Path
) -> None:
    """The default suite's chats, each side rendering them with the fixture's own template
    (vLLM through /v1/chat/completions, our adapter through the model's template)."""
    from infergate.engines.client import EngineClient

    vllm = engines.server("vllm", "bfloat16")
    adapter = engines.server("transformers", "float32")
    chats = load_suite("default").select(chat=True).prompts
    assert chats
    for prompt in chats:
        messages = [m.model_dump() for m in prompt.messages or ()]
        rendered = []
        for server in (vllm, adapter):
            with EngineClient(server.url, MODEL) as client:
                rendered.append(client.chat(messages, max_tokens=2, top_logprobs=2, seed=42))
        assert rendered[0].prompt_token_ids == rendered[1].prompt_token_ids, prompt.id
    base = _record(fixture_model, vllm, tmp_path / "b", suite="chat", hidden=False)
    again = _record(
        fixture_model, vllm, tmp_path / "a", suite="chat", hidden=False, baseline=base.path
    )
    _, result = _judge(base, again, ProfileName.BF16_KERNEL, hidden=False)
    assert set(result.metrics.strata) == {"chat"}
    kl = result.metrics.strata["chat"]["meanKl"]
    assert kl.evidence == len(chats)
    assert kl.value is not None
    assert kl.value == pytest.approx(0.0, abs=1e-6)


CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _with_template(fixture_model: Path, out: Path, template: str) -> Path:
    import shutil

    shutil.copytree(fixture_model, out)
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return out


def test_chats_go_through_the_served_template_and_a_changed_one_fails(
    fixture_model: Path, tmp_path: Path
) -> None:
    from infergate.engines.client import EngineClient
    from infergate.engines.launch import EngineServer, ServerSpec

    served = _with_template(fixture_model, tmp_path / "chatml", CHATML)
    changed = _with_template(
        fixture_model, tmp_path / "changed", CHATML.replace("'\\n' +", "'\\n\\n' +", 1)
    )
    messages = [{"role": "user", "content": "Tell me about the river."}]
    with (
        EngineServer(ServerSpec("vllm", served, "bfloat16"), tmp_path / "v.log").start(600) as vllm,
        EngineServer(ServerSpec("transformers", served, "float32"), tmp_path / "t.log").start(
            600
        ) as adapter,
        EngineServer(ServerSpec("transformers", changed, "float32"), tmp_path / "c.log").start(
            600
        ) as drifted,
    ):
        ids = []
        for server in (vllm, adapter):
            with EngineClient(server.url, MODEL) as client:
                ids.append(client.chat(messages, max_tokens=4, top_logprobs=2, seed=42))
        assert ids[0].prompt_token_ids == ids[1].prompt_token_ids
        base = _record(served, adapter, tmp_path / "b", suite="chat", hidden=False)
        cand = _record(
            changed, drifted, tmp_path / "c", suite="chat", hidden=False, baseline=base.path
        )
    verdict, _ = _judge(base, cand, ProfileName.FP32_CROSS_FRAMEWORK, hidden=False)
    assert verdict.status == VerdictStatus.FAILED
    text = "\n".join(verdict.reasons)
    assert "PromptTokensDiffer" in text
    assert "chat_template.digest" in text
