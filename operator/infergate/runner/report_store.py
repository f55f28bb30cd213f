"""The report ConfigMap's content: the HTML report and the JSON result, within 1 MiB (pure).

A ConfigMap holds at most 1 MiB in all. Each document is stored as plain text
(`data`) when it fits its share, else gzip-compressed (`binaryData`, base64 on the
wire). When even compressed the JSON would not fit, per-prompt detail is trimmed
(worst outputs first, then the per-prompt table), and the document says so; the
suite-level metrics and the verdict are never trimmed.
`infergate parity report` reads either form back.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infergate.render.check_names import REPORT_HTML_GZIP_KEY, REPORT_HTML_KEY, REPORT_JSON_KEY

REPORT_JSON_GZIP_KEY = f"{REPORT_JSON_KEY}.gz"
CONFIGMAP_LIMIT = 1024 * 1024
# Room for metadata, keys and the base64 expansion of binaryData (4/3).
_BUDGET = 900 * 1024
_JSON_SHARE = 300 * 1024
_PLAIN_LIMIT = 256 * 1024


class ReportTooLargeError(ValueError):
    """Even the trimmed, compressed report does not fit a ConfigMap."""


@dataclass
class ReportData:
    """`data` and `binaryData` of the report ConfigMap, and what was trimmed to fit."""

    data: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, str] = field(default_factory=dict)
    trimmed: list[str] = field(default_factory=list)

    def size(self) -> int:
        """Bytes the keys and values take in the stored object."""
        return sum(len(k) + len(v.encode()) for k, v in self.data.items()) + sum(
            len(k) + len(v) for k, v in self.binary_data.items()
        )


def _gzip_b64(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode()


def _store(report: ReportData, plain_key: str, gzip_key: str, text: str, share: int) -> bool:
    """Put `text` plain if small, else compressed; False when it exceeds `share` even so."""
    if len(text.encode()) <= min(_PLAIN_LIMIT, share):
        report.data[plain_key] = text
        return True
    packed = _gzip_b64(text)
    if len(packed) <= share:
        report.binary_data[gzip_key] = packed
        return True
    return False


def _trim(document: dict[str, Any], step: int) -> tuple[dict[str, Any], str] | None:
    """The document with one more kind of per-prompt detail removed; None when nothing is left."""
    result = dict(document.get("result") or {})
    if step == 0 and result.get("outputs"):
        result["outputs"] = []
        note = "result.outputs (worst prompts' token ids) dropped to fit the ConfigMap"
    elif step == 1 and len(result.get("prompts") or []) > 50:
        result["prompts"] = result["prompts"][:50]
        note = "result.prompts cut to the first 50 prompts to fit the ConfigMap"
    elif step == 2 and result.get("prompts"):
        result["prompts"] = []
        note = "result.prompts (per-prompt table) dropped to fit the ConfigMap"
    else:
        return None
    return {**document, "result": result}, note


def build_report_data(document: Mapping[str, Any], html: str) -> ReportData:
    """The ConfigMap content for one check's result document and HTML report."""
    report = ReportData()
    current = dict(document)
    step = 0
    while True:
        text = json.dumps({**current, "trimmed": report.trimmed}, separators=(",", ":"))
        if _store(report, REPORT_JSON_KEY, REPORT_JSON_GZIP_KEY, text, _JSON_SHARE):
            break
        trimmed = None
        while trimmed is None and step < 3:
            trimmed = _trim(current, step)
            step += 1
        if trimmed is None:
            raise ReportTooLargeError(
                f"result JSON is {len(text.encode())} bytes and still over {_JSON_SHARE} "
                "compressed after trimming per-prompt detail"
            )
        current, note = trimmed
        report.trimmed.append(note)
    room = _BUDGET - report.size()
    if not _store(report, REPORT_HTML_KEY, REPORT_HTML_GZIP_KEY, html, room):
        note = (
            f"the HTML report ({len(html.encode())} bytes) does not fit the ConfigMap even "
            "compressed; rebuild it from result.json with `infergate parity report --html`"
        )
        report.trimmed.append(note)
    return report


def read_report(data: Mapping[str, str] | None, binary: Mapping[str, str] | None) -> dict[str, str]:
    """The documents of a report ConfigMap by plain key (report.html, result.json)."""
    out: dict[str, str] = {}
    data, binary = data or {}, binary or {}
    for plain, packed in (
        (REPORT_HTML_KEY, REPORT_HTML_GZIP_KEY),
        (REPORT_JSON_KEY, REPORT_JSON_GZIP_KEY),
    ):
        if plain in data:
            out[plain] = data[plain]
        elif packed in binary:
            out[plain] = gzip.decompress(base64.b64decode(binary[packed])).decode()
    return out
