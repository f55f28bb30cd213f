"""The metric names a PromQL expression reads (enough PromQL for dashboard tests).

Strings, label matchers, range and subquery brackets, grouping clauses, Grafana
variables, numbers and durations are removed first; what is left that is not a
function call or a keyword is a metric name.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_NUMBER = re.compile(
    r"(?<![\w:])(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|0x[0-9a-f]+|inf|nan)(?![\w:])", re.I
)
_DURATION = re.compile(r"(?<![\w:])(?:\d+(?:ms|s|m|h|d|w|y))+(?![\w:])")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
     "offset", "bool", "atan2", "inf", "nan"}
)  # fmt: skip


def metric_names(expression: str) -> set[str]:
    """Every metric name `expression` selects."""
    text = _STRING.sub(" ", expression)
    text = _GRAFANA_VARIABLE.sub(" 1 ", text)
    # A selector written as {__name__="x"} names its metric in a matcher: keep it.
    named = set(re.findall(r'__name__\s*=\s*"([^"]+)"', expression))
    while _BRACES.search(text):
        text = _BRACES.sub(" ", text)
    while _BRACKETS.search(text):
        text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group(0)
        following = text[match.end() :].lstrip()
        if following.startswith("(") or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names | named
