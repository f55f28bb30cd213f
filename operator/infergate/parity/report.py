"""The parity report as one self-contained HTML page (inline CSS and SVG, no assets).

A pure function of the result and the verdict; the caller writes the string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from infergate.accounting import describe_overhead
from infergate.parity.metrics import ParityResult, PromptOutputs, PromptSummary
from infergate.parity.svg import bar_chart, step_chart
from infergate.parity.verdict import Verdict, VerdictStatus

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
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#1f2328}
h1 .badge{color:#fff;padding:.1em .5em;border-radius:.3em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #d0d7de;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f6f8fa}td.num{text-align:right;
font-variant-numeric:tabular-nums}.tokens{font-family:monospace;font-size:12px;max-width:520px;
word-wrap:break-word}.tokens mark{background:#ffebe9}.charts{display:flex;flex-wrap:wrap;gap:1em}
.muted{color:#57606a}ul.reasons li{margin:.3em 0}svg{max-width:100%;height:auto}
@page{size:A4;margin:12mm}
@media print{body{margin:0;max-width:none;font-size:10pt}
h1 .badge,th,.tokens mark{-webkit-print-color-adjust:exact;print-color-adjust:exact}
h2{break-after:avoid;page-break-after:avoid}
.charts{display:block}.charts>div{break-inside:avoid;page-break-inside:avoid;margin:0 0 .8em}
tr{break-inside:avoid;page-break-inside:avoid}thead{display:table-header-group}
table{table-layout:fixed;width:100%;font-size:8.5pt}td,th{overflow-wrap:anywhere}
code{font-size:8pt}
.tokens{max-width:none;overflow-wrap:anywhere}}
"""


def _num(value: float | None, digits: int = 6) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


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
    order (plan.revision_diff); None when a side is not a revision (an endpoint).
    `sections`: trusted HTML fragments (already escaped, e.g. the per-layer chart) shown
    after the reasons.
    `overhead`: the runner's overhead as the check's status carries it
    (infergate.accounting.overhead_fields), when measured.
    """
    status = verdict.status
    title = f"Parity {status.value}: {result.candidate.engine} vs {result.baseline.engine}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        (
            f'<h1>Parity <span class="badge" style="background:{_STATUS_COLOUR[status]}">'
            f"{escape(status.value)}</span></h1>"
        ),
        _sides(result, profile),
        _changes(changes),
        _reasons(verdict),
        *sections,
        "<h2>Thresholds</h2>",
        _checks_table(verdict),
        "<h2>Metrics</h2>",
        _metrics_table(result),
        "<h2>Plots</h2>",
        _plots(result),
        "<h2>Worst prompts</h2>",
        _outputs(result.outputs, {p.prompt_id: p for p in result.prompts}),
    ]
    if overhead:
        parts.append("<h2>Runner overhead</h2>")
        parts.append(f'<p class="overhead">{escape(describe_overhead(overhead))}</p>')
    if result.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts.extend(f"<li>{escape(n)}</li>" for n in result.notes)
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


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


def _changes(changes: Sequence[str] | None) -> str:
    if changes is None:
        return ""
    if not changes:
        return "<h2>What changed</h2><p>No field of the revision differs.</p>"
    items = "".join(f"<li><code>{escape(c)}</code></li>" for c in changes)
    return f'<h2>What changed</h2><ul class="reasons">{items}</ul>'


def _sides(result: ParityResult, profile: str | None) -> str:
    rows = "".join(
        f"<tr><th>{escape(name)}</th><td>{escape(side.engine)} {escape(side.engine_version)}</td>"
        f"<td>{escape(side.dtype)}</td><td>{escape(side.model)}</td>"
        f"<td><code>{escape(side.config_hash)}</code></td><td>{escape(side.suite)}</td></tr>"
        for name, side in (("baseline", result.baseline), ("candidate", result.candidate))
    )
    shown = f"<p>Profile: <b>{escape(profile)}</b></p>" if profile else ""
    return (
        "<table><tr><th></th><th>engine</th><th>dtype</th><th>model</th><th>config hash</th>"
        f"<th>suite</th></tr>{rows}</table>{shown}"
        f"<p>{result.metrics.prompts} prompts compared.</p>"
    )


def _reasons(verdict: Verdict) -> str:
    parts = []
    if verdict.reasons:
        parts.append('<h2>Why</h2><ul class="reasons">')
        parts.extend(f"<li>{escape(r)}</li>" for r in verdict.reasons)
        parts.append("</ul>")
    if verdict.warnings:
        parts.append('<h2>Warnings</h2><ul class="reasons">')
        parts.extend(f"<li>{escape(w)}</li>" for w in verdict.warnings)
        parts.append("</ul>")
    if verdict.excluded:
        parts.append('<h2>Not part of this verdict</h2><ul class="reasons">')
        parts.extend(f"<li>{escape(e)}</li>" for e in verdict.excluded)
        parts.append("</ul>")
    if verdict.regressions:
        parts.append("<h2>Against the last passing check</h2><ul>")
        parts.extend(
            f"<li>{'REGRESSED: ' if r.regressed else ''}{escape(r.message)}</li>"
            for r in verdict.regressions
        )
        parts.append("</ul>")
    return "".join(parts)


def _checks_table(verdict: Verdict) -> str:
    if not verdict.checks:
        return '<p class="muted">No thresholds set.</p>'
    rows = "".join(
        f"<tr><td><code>{escape(c.key)}</code></td><td>{escape(c.label)}</td>"
        f'<td class="num">{_num(c.value)}</td>'
        f'<td class="num">{_num(c.lower, 4)} .. {_num(c.upper, 4)}</td><td>{escape(c.op)}</td>'
        f'<td class="num">{_num(c.threshold)}</td>'
        f'<td style="color:{_OUTCOME_COLOUR[c.outcome]};font-weight:bold">{c.outcome}</td>'
        f"<td>{escape(', '.join(c.worst_prompts))}</td></tr>"
        for c in verdict.checks
    )
    return (
        f"<p>Every limit is decided on a one-sided {verdict.confidence:.0%} confidence bound: "
        "pass when the bound on the bad side is within it, fail when the bound on the good "
        "side is past it, inconclusive otherwise.</p>"
        "<table><tr><th>threshold</th><th>metric</th><th>value</th><th>bounds</th><th></th>"
        f"<th>limit</th><th>outcome</th><th>worst prompts</th></tr>{rows}</table>"
    )


def _metrics_table(result: ParityResult) -> str:
    m = result.metrics
    fd = m.tokens.first_divergence
    rows: list[tuple[str, str]] = [
        (
            "token match rate",
            (
                f"{_num(m.tokens.match_rate.value)} "
                f"({m.tokens.match_rate.successes}/{m.tokens.match_rate.total})"
            ),
        ),
        ("token agreement", _num(m.tokens.agreement.value)),
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
    rows.append(("legitimate divergence rate", "n/a" if legit is None else _num(legit.value)))
    rows.append(("baseline logprob gap at fork, max", _num(m.tokens.divergence_logprob_gap_max)))
    if m.logprobs is not None:
        lp = m.logprobs
        rows += [
            ("mean KL (nats)", f"{_num(lp.mean_kl.value)} ± {_num(lp.mean_kl.stderr, 2)}"),
            ("KL P99 / max", f"{_num(lp.kl_p99)} / {_num(lp.kl_max)}"),
            ("same-top-token rate", _num(lp.same_top_rate.value)),
            ("delta-p mean / RMS", f"{_num(lp.delta_p_mean)} / {_num(lp.delta_p_rms)}"),
            (
                "log perplexity ratio (candidate / baseline)",
                "n/a"
                if lp.target_logprob_delta is None or lp.target_logprob_delta.value is None
                else _num(0.0 - lp.target_logprob_delta.value),
            ),
            ("top-k covered probability mass", _num(lp.covered_mass)),
            (
                "scored positions (prompt / generated / full vocabulary)",
                f"{lp.prompt_steps} / {lp.generated_steps} / {lp.full_vocab_steps}",
            ),
            ("teacher-forced prompts", str(lp.teacher_forced_prompts)),
        ]
    if m.hidden is not None:
        h = m.hidden
        rows += [
            ("hidden max abs error", _num(h.max_abs_err)),
            ("hidden mean abs error", _num(h.mean_abs_err.value)),
            ("hidden relative L2 mean / P99", f"{_num(h.rel_l2.value)} / {_num(h.rel_l2_p99)}"),
            ("hidden cosine mean / P1", f"{_num(h.cosine.value, 8)} / {_num(h.cosine_p1, 8)}"),
            (
                "hidden log norm ratio mean / mean |.|",
                (
                    f"{_num(None if h.norm_log_ratio is None else h.norm_log_ratio.value)} / "
                    f"{_num(None if h.norm_abs_log_ratio is None else h.norm_abs_log_ratio.value)}"
                ),
            ),
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
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>" + _long_table(result)


def _long_table(result: ParityResult) -> str:
    long = result.metrics.long_sequence.per_prompt
    if not long:
        return ""
    rows = "".join(
        f"<tr><td>{escape(p.prompt_id)}</td><td class='num'>{p.tokens}</td>"
        f"<td class='num'>{_num(p.short_kl, 3)}</td><td class='num'>{_num(p.far_kl, 3)}</td>"
        f"<td class='num'>{_num(p.kl_ratio, 3)}</td>"
        f"<td class='num'>{_num(p.short_rel_l2, 3)}</td>"
        f"<td class='num'>{_num(p.far_rel_l2, 3)}</td>"
        f"<td>{escape('; '.join(p.failures))}</td></tr>"
        for p in long
    )
    return (
        "<h3>Long prompts, each on its own positions</h3><table><tr><th>prompt</th>"
        "<th>tokens</th><th>KL 0-1K</th><th>KL far</th><th>ratio</th><th>relL2 0-1K</th>"
        f"<th>relL2 far</th><th>failures</th></tr>{rows}</table>"
    )


def _plots(result: ParityResult) -> str:
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
    charts = (survival, by_bucket, kl_bucket, per_prompt, kl_prompt)
    return '<div class="charts">' + "".join(f"<div>{c}</div>" for c in charts) + "</div>"


def _one_minus(value: float | None) -> float | None:
    return None if value is None else 1.0 - value


def _tokens(ids: Sequence[int], fork: int | None) -> str:
    cut = len(ids) if fork is None else min(fork, len(ids))
    head = " ".join(str(t) for t in ids[:cut])
    tail = " ".join(str(t) for t in ids[cut:])
    return escape(head) + (f" <mark>{escape(tail)}</mark>" if tail else "")


def _outputs(outputs: Sequence[PromptOutputs], summaries: dict[str, PromptSummary]) -> str:
    if not outputs:
        return '<p class="muted">Every prompt agrees on every measure shown.</p>'
    rows = []
    for out in outputs:
        s = summaries.get(out.prompt_id)
        fork = None if s is None else s.first_divergence
        facts = (
            ""
            if s is None
            else (
                f"fork at {fork if fork is not None else 'none'}; {escape(s.legitimacy_note)}"
                f"<br>mean KL {_num(s.mean_kl, 3)}; cosine P1 {_num(s.hidden_cosine_p1, 8)}"
            )
        )
        texts = ""
        if out.baseline_text is not None or out.candidate_text is not None:
            texts = (
                f"<tr><td></td><td>{escape(out.baseline_text or '')}</td>"
                f"<td>{escape(out.candidate_text or '')}</td></tr>"
            )
        rows.append(
            f"<tr><td><b>{escape(out.prompt_id)}</b><br><small>{facts}</small></td>"
            f'<td class="tokens">{_tokens(out.baseline_token_ids, fork)}</td>'
            f'<td class="tokens">{_tokens(out.candidate_token_ids, fork)}</td></tr>{texts}'
        )
    return (
        "<table><tr><th>prompt</th><th>baseline output</th><th>candidate output</th></tr>"
        + "".join(rows)
        + "</table><p class='muted'>Highlighted: tokens from the first divergence on.</p>"
    )
