"""The HTML parity report of a failed check, opened in a real browser (Debian's
chromium, driven by Playwright): no console errors, every plot drawn and visible, a
screenshot kept for people (out/browser/failed-report.png), and printed to PDF with
the plots whole and nothing cut at the page's edge.

The report comes from the parity core, as the runner makes it: two records whose
outputs fork early and illegitimately, compared under the bf16-kernel profile.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pypdf import PdfReader

from infergate.parity.compare import compare_sources
from infergate.parity.profiles import resolve_thresholds
from infergate.parity.thresholds import ProfileName
from infergate.parity.verdict import VerdictStatus, decide
from infergate.report.page import render_report
from tests.tools import REPO, chromium
from tests.unit.parity.builders import fork_pair, record, replace, suite

OUT = REPO / "out" / "browser"
# Flags for this machine's closed network (no background connections) and for root.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# A4 at 96 px per inch less the report's 12 mm print margins: the printable width.
A4_CONTENT_WIDTH_PX = round((210 - 2 * 12) / 25.4 * 96)
PLOT_TITLES = (
    "First-divergence survival",
    "Hidden-state relative L2 error by position bucket",
    "Mean KL by position bucket",
    "Per-prompt hidden-state error",
    "Per-prompt mean KL",
)


@pytest.fixture(scope="module")
def report() -> Path:
    """A failed check's report, written where people (and CI artifacts) find it."""
    pairs = [fork_pair(p, at=2, legitimate=False) for p in suite(12)]
    rng = np.random.default_rng(7)
    candidates = []
    for index, (_, candidate) in enumerate(pairs):
        # Hidden states off by a growing relative error, so every plot has bars to draw.
        states = candidate.hidden_states
        assert states is not None
        noise = rng.standard_normal(states.shape).astype(np.float32) * 1e-3 * (index + 1)
        candidates.append(replace(candidate, hidden_states=states * (1 + noise)))
    result = compare_sources(
        record([b for b, _ in pairs]),
        record(candidates),
        resolve_thresholds(ProfileName.BF16_KERNEL),
    )
    verdict = decide(result)
    assert verdict.status is VerdictStatus.FAILED
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "failed-report.html"
    path.write_text(render_report(result, verdict, "bf16-kernel"), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium()), args=CHROMIUM_FLAGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A fresh page and the problems it reports: console errors, page errors, failed loads."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    opened.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
    yield opened, problems
    context.close()


def _plots(page: Any) -> list[dict[str, Any]]:
    """Each chart's title, box, and the boxes of what is drawn inside it."""
    found: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('.charts svg')].map(svg => {
            const box = svg.getBoundingClientRect();
            const style = getComputedStyle(svg);
            // Data marks: the survival line and the bars (each bar carries a <title>).
            const marks = [...svg.querySelectorAll('polyline, rect')]
                .filter(m => m.tagName === 'polyline' || m.querySelector('title'))
                .map(m => m.getBoundingClientRect())
                .filter(r => r.width > 0 && r.height > 0).length;
            const holder = getComputedStyle(svg.parentElement);
            return {title: svg.getAttribute('aria-label'), x: box.x, y: box.y,
                    width: box.width, height: box.height, right: box.right,
                    visible: style.visibility !== 'hidden' && style.display !== 'none',
                    marks: marks, breakInside: holder.breakInside};
        })"""
    )
    return found


def test_the_failed_report_renders_without_console_errors_and_its_plots_are_visible(
    report: Path, page: tuple[Any, list[str]], record_property: Any
) -> None:
    opened, problems = page
    opened.goto(report.as_uri())
    opened.wait_for_load_state("load")
    assert problems == []
    assert opened.title().startswith("Parity Failed")
    assert opened.locator("h1 .badge").inner_text() == "Failed"
    plots = _plots(opened)
    assert [p["title"] for p in plots] == list(PLOT_TITLES)
    for plot in plots:
        assert plot["visible"], plot["title"]
        assert plot["width"] > 100, plot
        assert plot["height"] > 50, plot
        assert plot["marks"] > 0, f"{plot['title']}: nothing drawn"
        opened.locator(f'svg[aria-label="{plot["title"]}"]').scroll_into_view_if_needed()
        assert opened.locator(f'svg[aria-label="{plot["title"]}"]').is_visible()
    screenshot = OUT / "failed-report.png"
    opened.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    record_property("screenshot", str(screenshot))
    print(f"\nscreenshot of the failed report: {screenshot}")  # noqa: T201 - shown in the test log


def test_printed_the_plots_stay_whole_and_nothing_is_cut_at_the_page_edge(
    report: Path, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": A4_CONTENT_WIDTH_PX, "height": 1000})
    opened = context.new_page()
    opened.emulate_media(media="print")
    opened.goto(report.as_uri())
    for plot in _plots(opened):
        assert plot["breakInside"] == "avoid", plot["title"]
        assert plot["right"] <= A4_CONTENT_WIDTH_PX + 0.5, plot
    widest = opened.evaluate("() => document.documentElement.scrollWidth")
    assert widest <= A4_CONTENT_WIDTH_PX, "something is wider than the printed page"
    context.close()


def test_printing_to_pdf_gives_the_report_s_pages(report: Path, tmp_path: Path) -> None:
    pdf = OUT / "failed-report.pdf"
    pdf.unlink(missing_ok=True)
    subprocess.run(
        [str(chromium()), "--headless", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path}",
         "--no-pdf-header-footer", f"--print-to-pdf={pdf}", report.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert pdf.read_bytes().startswith(b"%PDF")
    pages = PdfReader(str(pdf)).pages
    assert len(pages) >= 2
    text = " ".join(" ".join(page.extract_text().split()) for page in pages)
    # The report's sections, in order (SVG text is printed as outlines, not as text).
    sections = ["Parity Failed", "Thresholds", "Metrics", "Plots", "Worst prompts"]
    found = [text.find(section) for section in sections]
    shown = dict(zip(sections, found, strict=True))
    assert -1 not in found, shown
    assert found == sorted(found), shown
    print(f"\nprinted report: {pdf} ({len(pages)} pages)")  # noqa: T201 - shown in the test log
