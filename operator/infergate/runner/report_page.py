"""The HTML page of a check's report: the one place the runner renders one.

A suite check's page shows its result, verdict, what the revision changes and the
sections only a run has (the per-layer chart); a shadow check's page shows the pooled
copies' result, or, when no copy could be judged, only why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from infergate.parity.metrics import ParityResult
from infergate.parity.verdict import Verdict, decide
from infergate.report.page import render_report


def check_page(
    result: ParityResult,
    verdict: Verdict,
    profile: str,
    changes: Sequence[str] | None,
    *,
    sections: Sequence[str],
    overhead: Mapping[str, Any],
) -> str:
    """A suite check's page (`profile`: the profile and why it was chosen)."""
    return render_report(result, verdict, profile, changes, sections=sections, overhead=overhead)


def shadow_page(shown: ParityResult | None, profile: str, summary: str) -> str:
    """A shadow check's page: the pooled result judged on its own, or the summary alone."""
    if shown is None:
        return f"<p>{escape(summary)}</p>"
    return render_report(shown, decide(shown), f"{profile}; shadow: {summary}")
