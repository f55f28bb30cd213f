"""The files a platform team looks for at the root of a repository: the licence that
pyproject.toml declares, a changelog with a section for the version being built, and a
security policy that says how to report and links the RBAC it relies on."""

from __future__ import annotations

import re
import tomllib

from tests.tools import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_licence_is_the_one_pyproject_declares() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_a_section_for_the_version_being_built() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert versions[0] == "Unreleased"
    assert PYPROJECT["project"]["version"] in versions


def test_the_security_policy_says_how_to_report_and_links_what_it_relies_on() -> None:
    text = (REPO / "SECURITY.md").read_text(encoding="utf-8")
    for heading in (
        "## Reporting a vulnerability",
        "## What is in scope",
        "## What is not in scope",
    ):
        assert heading in text
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert "docs/rbac.md" in links
    for link in links:
        if not link.startswith("http"):
            assert (REPO / link).is_file(), link
