"""The HTML report: self-contained, with the verdict, the threshold rows and the outputs."""

from __future__ import annotations

import json
import re

from infergate.parity.compare import compare_sources
from infergate.parity.profiles import resolve_thresholds
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import decide
from infergate.report.page import render_report, render_report_from_json
from tests.unit.parity.builders import fork_pair, record, replace, suite


def _report(text_of_p0: str = "text of p0") -> str:
    pairs = [fork_pair(p, at=2, legitimate=False) for p in suite(3)]
    base = [b for b, _ in pairs]
    cand = [c for _, c in pairs]
    cand[0] = replace(cand[0], output_text=text_of_p0)
    result = compare_sources(
        record(base), record(cand), resolve_thresholds(ProfileName.BF16_KERNEL)
    )
    return render_report(result, decide(result), "bf16-kernel")


def test_report_is_self_contained() -> None:
    html = _report()
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img)\b", html)
    # The only URL is the SVG namespace, which browsers never fetch.
    urls = set(re.findall(r"https?://[^\s\"']+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}


def test_report_shows_verdict_reasons_and_metric_rows() -> None:
    html = _report()
    assert "Failed</span></h1>" in html
    assert "minFirstDivergenceP10: first unexplained divergence P10 2 &lt; 16" in html
    assert "<code>maxIllegitimateDivergenceRate</code>" in html
    assert "one-sided 95% confidence bound" in html
    assert "<th>token match rate</th><td>0 (0/3)</td>" in html
    assert html.count("<svg") == 5
    assert "First-divergence survival" in html


def test_report_puts_both_outputs_side_by_side_with_the_fork_marked() -> None:
    html = _report()
    row = html[html.index("<b>p0</b>") :]
    row = row[: row.index("</tr>")]
    assert row.count('class="tokens"') == 2
    assert row.count("<mark>") == 2
    assert "fork at 2" in row


def test_report_escapes_engine_text() -> None:
    html = _report("<script>alert(1)</script>")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_report_rebuilt_from_result_json_matches_the_rendered_one() -> None:
    """A report ConfigMap that kept only result.json still yields the same HTML report."""
    pairs = [fork_pair(p, at=2, legitimate=False) for p in suite(3)]
    result = compare_sources(
        record([b for b, _ in pairs]),
        record([c for _, c in pairs]),
        resolve_thresholds(ProfileName.BF16_KERNEL),
    )
    verdict = decide(result)
    document = {
        "profile": "bf16-kernel",
        "profileReason": "chosen by the spec",
        "verdict": verdict.model_dump(mode="json", by_alias=True),
        "result": result.model_dump(mode="json", by_alias=True),
    }
    rebuilt = render_report_from_json(json.dumps(document))
    assert rebuilt == render_report(result, verdict, "bf16-kernel (chosen by the spec)")
    changed = render_report_from_json(json.dumps(document | {"changes": ["engine.dtype: a -> b"]}))
    assert changed == render_report(
        result, verdict, "bf16-kernel (chosen by the spec)", ["engine.dtype: a -> b"]
    )
    assert "<h2>What changed</h2>" in changed
    assert "What changed" not in rebuilt  # endpoints: no revisions to compare
    # The runner's overhead travels in the document too.
    overhead = {"ratio": 1.04, "ratioBound": 2.08, "wallSeconds": 5.2, "engineSeconds": 5.0,
                "requests": 96, "concurrency": 2}  # fmt: skip
    with_overhead = render_report_from_json(json.dumps({**document, "overhead": overhead}))
    assert "Runner overhead" in with_overhead
    assert "runner overhead 1.04 (wall 5.2 s over 5.0 s of engine time for 96 requests" in (
        with_overhead
    )
    assert "Runner overhead" not in rebuilt


def test_the_report_says_where_each_limit_came_from_and_what_the_suite_can_detect() -> None:
    """A reader of a Passed or Failed report can trace every limit (static here: no noise
    kept, depth scaling stated) and see the smallest control the suite detected."""
    from infergate.parity.calibrated import calibration_need, derive_limits

    prompts = suite(40)
    thresholds = resolve_thresholds(ProfileName.BF16_KERNEL)
    derived = derive_limits(
        thresholds, need=calibration_need(ProfileName.BF16_KERNEL, "bfloat16", 28), noise=None,
        layers=28, static_layers=2,
    )  # fmt: skip
    result = compare_sources(record(prompts), record(prompts), derived.thresholds)
    result = result.model_copy(update={"calibration": derived})
    html = render_report(result, decide(result), "bf16-kernel")
    section = html.split("Limits and power", 1)[1].split("<h2>Metrics", 1)[0]
    assert "<li>Calibration: none kept for the baseline&#39;s revision.</li>" in section
    assert "<li>max_mean_kl 0.0001: static profile limit, depth x14 (2 -&gt; 28 layers)</li>" in (
        section
    )
    assert "minimum detectable effect: final norm x1.01 (1.0%)" in section
