"""The report ConfigMap stays under the 1 MiB limit: plain, compressed, then trimmed."""

from __future__ import annotations

import json
import random
import string

from infergate.runner.report_store import CONFIGMAP_LIMIT, build_report_data, read_report


def _noise(n: int, seed: int) -> str:
    rng = random.Random(seed)  # noqa: S311 - filler text, not secrets
    return "".join(rng.choice(string.ascii_letters) for _ in range(n))


def document(prompts: int, text_per_prompt: int = 40) -> dict[str, object]:
    return {
        "status": "Failed",
        "verdict": {"status": "Failed", "reasons": ["minTokenMatchRate: 0.5 < 0.9"]},
        "result": {
            "metrics": {"prompts": prompts, "tokens": {"matchRate": 0.5}},
            "prompts": [
                {"promptId": f"p{i}", "note": _noise(text_per_prompt, i)} for i in range(prompts)
            ],
            "outputs": [{"promptId": f"p{i}", "baselineText": _noise(2000, -i)} for i in range(50)],
        },
    }


def test_a_small_report_is_stored_as_plain_text() -> None:
    data = build_report_data(document(5), "<html>ok</html>")
    assert data.data["report.html"] == "<html>ok</html>"
    assert json.loads(data.data["result.json"])["status"] == "Failed"
    assert data.binary_data == {}
    assert data.trimmed == []


def test_a_large_report_is_compressed_and_reads_back_unchanged() -> None:
    html = "<html>" + "<tr><td>row</td></tr>" * 40_000 + "</html>"  # 800 KB, compresses well
    data = build_report_data(document(5), html)
    assert "report.html" not in data.data
    assert data.size() < CONFIGMAP_LIMIT
    assert read_report(data.data, data.binary_data)["report.html"] == html


def test_per_prompt_detail_is_trimmed_before_the_verdict_and_metrics() -> None:
    doc = document(20_000, text_per_prompt=60)  # incompressible, over a megabyte
    data = build_report_data(doc, "<html></html>")
    assert data.size() < CONFIGMAP_LIMIT
    stored = json.loads(read_report(data.data, data.binary_data)["result.json"])
    assert stored["verdict"] == doc["verdict"]
    assert stored["result"]["metrics"] == {"prompts": 20_000, "tokens": {"matchRate": 0.5}}
    assert stored["result"]["outputs"] == []
    assert stored["trimmed"]
    assert any("outputs" in note for note in data.trimmed)


def test_an_html_report_too_large_even_compressed_is_left_out_with_a_note() -> None:
    html = _noise(1_500_000, 3)
    data = build_report_data(document(5), html)
    assert data.size() < CONFIGMAP_LIMIT
    assert "report.html" not in read_report(data.data, data.binary_data)
    assert any("does not fit" in note for note in data.trimmed)
