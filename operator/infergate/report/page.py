"""The parity report as one self-contained HTML page (inline CSS and SVG, no assets).

A pure function of the result and the verdict; the caller writes the string. This module
decides what the page shows (which metric rows, which plots, where each output forks);
`templates/report.html.j2` and its sections lay it out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from infergate.accounting import describe_overhead
from infergate.parity.metrics import ParityResult, PromptOutputs, PromptSummary
from infergate.parity.verdict import Verdict, VerdictStatus
from infergate.report.charts import bar_chart, step_chart
from infergate.report.templates import number, template

_STATUS_COLOUR = {
    VerdictStatus.PASSED: "#1a7f37",
    VerdictStatus.FAILED: "#d1242f",
    VerdictStatus.INCONCLUSIVE: "#8250df",
    VerdictStatus.ERROR: "#9a6700",
}
_OUTCOME_COLOUR = {
    "pass": "#1a7f37",
    "fail": "#d1242f",
    "inconclusive": "#8250df",
    "unmeasured": "#9a6700",
    "disabled": "#57606a",
    "not-required": "#57606a",
}


def render_report(
    result: ParityResult,
    verdict: Verdict,
    profile: str | None = None,
    changes: Sequence[str] | None = None,
    *,
    sections: Sequence[str] = (),
    overhead: Mapping[str, Any] | None = None,
) -> str:
    """The whole report page for one parity check.

    `changes`: the fields that differ between the two revisions, one line each, in reading
    order (plan.deployment.revision_diff); None when a side is not a revision (an endpoint).
    `sections`: trusted HTML fragments (already escaped, e.g. the per-layer chart) shown
    after the reasons.
    `overhead`: the runner's overhead as the check's status carries it
    (infergate.accounting.overhead_fields), when measured.
    """
    status = verdict.status
    summaries = {p.prompt_id: p for p in result.prompts}
    return template("report.html.j2").render(
        title=f"Parity {status.value}: {result.candidate.engine} vs {result.baseline.engine}",
        status_colour=_STATUS_COLOUR[status],
        outcome_colours=_OUTCOME_COLOUR,
        result=result,
        verdict=verdict,
        confidence=f"{verdict.confidence:.0%}",
        profile=profile,
        changes=changes,
        # Made by our own code and escaped there (the caller's contract, see above).
        sections=[Markup(s) for s in sections],  # noqa: S704
        metric_rows=_metric_rows(result),
        charts=[Markup(c) for c in _plots(result)],  # noqa: S704 - our charts, escaped
        outputs=[_output_row(out, summaries.get(out.prompt_id)) for out in result.outputs],
        overhead=describe_overhead(overhead) if overhead else None,
    )


def render_report_from_json(text: str) -> str:
    """The report of a result document (result.json: result, verdict and profile).

    Used when a report ConfigMap had no room for the HTML and kept only the JSON.
    """
    document = json.loads(text)
    result = ParityResult.model_validate(document["result"])
    verdict = Verdict.model_validate(document["verdict"])
    profile, why = document.get("profile"), document.get("profileReason")
    changes = document.get("changes")
    return render_report(
        result,
        verdict,
        f"{profile} ({why})" if profile and why else profile,
        [str(c) for c in changes] if isinstance(changes, list) else None,
        overhead=document.get("overhead") or None,
    )


def _metric_rows(result: ParityResult) -> list[tuple[str, str]]:
    """The metrics table, (label, value) per row; rows of unmeasured channels left out."""
    m = result.metrics
    fd = m.tokens.first_divergence
    rows: list[tuple[str, str]] = [
        (
            "token match rate",
            (
                f"{number(m.tokens.match_rate.value)} "
                f"({m.tokens.match_rate.successes}/{m.tokens.match_rate.total})"
            ),
        ),
        ("token agreement", number(m.tokens.agreement.value)),
        (
            "first divergence median / P10",
            (
                f"{'≥ ' if fd.median_censored else ''}{fd.median} / "
                f"{'≥ ' if fd.p10_censored else ''}{fd.p10} "
                f"({fd.diverged} of {fd.prompts} diverged)"
            ),
        ),
    ]
    legit = m.tokens.legitimate_divergence_rate
    rows.append(("legitimate divergence rate", "n/a" if legit is None else number(legit.value)))
    rows.append(("baseline logprob gap at fork, max", number(m.tokens.divergence_logprob_gap_max)))
    if m.logprobs is not None:
        lp = m.logprobs
        rows += [
            ("mean KL (nats)", f"{number(lp.mean_kl.value)} ± {number(lp.mean_kl.stderr, 2)}"),
            ("KL P99 / max", f"{number(lp.kl_p99)} / {number(lp.kl_max)}"),
            ("same-top-token rate", number(lp.same_top_rate.value)),
            ("delta-p mean / RMS", f"{number(lp.delta_p_mean)} / {number(lp.delta_p_rms)}"),
            (
                "log perplexity ratio (candidate / baseline)",
                "n/a"
                if lp.target_logprob_delta is None or lp.target_logprob_delta.value is None
                else number(0.0 - lp.target_logprob_delta.value),
            ),
            ("top-k covered probability mass", number(lp.covered_mass)),
            (
                "scored positions (prompt / generated / full vocabulary)",
                f"{lp.prompt_steps} / {lp.generated_steps} / {lp.full_vocab_steps}",
            ),
            ("teacher-forced prompts", str(lp.teacher_forced_prompts)),
        ]
    if m.hidden is not None:
        h = m.hidden
        norm = None if h.norm_log_ratio is None else h.norm_log_ratio.value
        norm_abs = None if h.norm_abs_log_ratio is None else h.norm_abs_log_ratio.value
        rows += [
            ("hidden max abs error", number(h.max_abs_err)),
            ("hidden mean abs error", number(h.mean_abs_err.value)),
            ("hidden relative L2 mean / P99", f"{number(h.rel_l2.value)} / {number(h.rel_l2_p99)}"),
            ("hidden cosine mean / P1", f"{number(h.cosine.value, 8)} / {number(h.cosine_p1, 8)}"),
            ("hidden log norm ratio mean / mean |.|", f"{number(norm)} / {number(norm_abs)}"),
            ("hidden tokens compared", str(h.tokens)),
        ]
    long = m.long_sequence
    rows.append(
        (
            f"long prompts (≥ {long.min_prompt_tokens} tokens) diverging",
            "none in suite"
            if long.divergence_rate is None
            else f"{long.divergence_rate.successes}/{long.divergence_rate.total}",
        )
    )
    if m.evidence is not None:
        e = m.evidence
        rows.append(
            (
                "evidence (prompts / long / scored steps / hidden tokens)",
                f"{e.prompts} / {e.long_prompts} / {e.scored_steps} / {e.hidden_tokens}",
            )
        )
    return rows


def _plots(result: ParityResult) -> list[str]:
    """The five plots, in the order the page shows them."""
    m = result.metrics
    fd = m.tokens.first_divergence
    survival = step_chart(
        "First-divergence survival",
        xs=[p.position for p in fd.survival],
        ys=[p.surviving for p in fd.survival],
        x_label="output tokens generated",
        y_label="share of prompts still identical",
    )
    names = [b.name for b in m.buckets]
    by_bucket = bar_chart(
        "Hidden-state relative L2 error by position bucket",
        names,
        [("mean", [b.rel_l2_mean for b in m.buckets]), ("P99", [b.rel_l2_p99 for b in m.buckets])],
        "relative L2 error",
        log=True,
    )
    kl_bucket = bar_chart(
        "Mean KL by position bucket",
        names,
        [("mean KL", [b.mean_kl for b in m.buckets])],
        "nats",
        log=True,
    )
    ids = [p.prompt_id for p in result.prompts]
    per_prompt = bar_chart(
        "Per-prompt hidden-state error",
        ids,
        [
            ("relL2 P99", [p.hidden_rel_l2_p99 for p in result.prompts]),
            ("1 - cosine P1", [_one_minus(p.hidden_cosine_p1) for p in result.prompts]),
        ],
        "error",
        log=True,
    )
    kl_prompt = bar_chart(
        "Per-prompt mean KL", ids, [("mean KL", [p.mean_kl for p in result.prompts])], "nats", True
    )
    return [survival, by_bucket, kl_bucket, per_prompt, kl_prompt]


def _one_minus(value: float | None) -> float | None:
    return None if value is None else 1.0 - value


@dataclass(frozen=True)
class _Tokens:
    """One side's output token ids, split at the first divergence (the tail is marked)."""

    head: str
    tail: str


@dataclass(frozen=True)
class _OutputRow:
    prompt_id: str
    summary: PromptSummary | None
    baseline: _Tokens
    candidate: _Tokens
    texts: tuple[str, str] | None
    """Both sides' output texts, when either side recorded its text."""


def _split(ids: Sequence[int], fork: int | None) -> _Tokens:
    cut = len(ids) if fork is None else min(fork, len(ids))
    return _Tokens(" ".join(str(t) for t in ids[:cut]), " ".join(str(t) for t in ids[cut:]))


def _output_row(out: PromptOutputs, summary: PromptSummary | None) -> _OutputRow:
    fork = None if summary is None else summary.first_divergence
    texts = None
    if out.baseline_text is not None or out.candidate_text is not None:
        texts = (out.baseline_text or "", out.candidate_text or "")
    return _OutputRow(
        prompt_id=out.prompt_id,
        summary=summary,
        baseline=_split(out.baseline_token_ids, fork),
        candidate=_split(out.candidate_token_ids, fork),
        texts=texts,
    )
