"""What the operator writes on a ParityCheck it makes, so that the verdict is bound (pure).

A verdict counts only for the spec the operator asked for (`plan.check.owned`), and the
spec must name everything the verdict depends on. Two things are stamped on a check
before it is created:

- `spec.suite.digest`, for a suite in a ConfigMap: the sha256 of the prompts the
  ConfigMap holds now, parsed as the runner parses them (`infergate.suite.config_map_suite`).
  The runner reads the ConfigMap when it starts and ends the check in Error (SuiteChanged)
  when the content differs, so an edit of the ConfigMap after the check was made cannot
  swap the prompts a verdict stands for. The controller reads the ConfigMaps a decision
  names (`unread_suites`) and decides again with what it saw (`SuiteSeen`); a suite that
  cannot be read or parsed leaves the digest unset, and such a check's Passed never counts
  (the runner would end it in Error anyway).
- the `infergate.io/spec-digest` annotation: the sha256 of the spec, suite digest included.

An inline suite is in the spec already: its digest is the spec's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infergate.jsontypes import JSON
from infergate.plan.check.owned import ANNOTATION_SPEC_DIGEST
from infergate.plan.check.status import spec_digest
from infergate.suite import SuiteError, config_map_suite


@dataclass(frozen=True)
class SuiteRef:
    """A suite in a ConfigMap of the check's namespace: `spec.suite.configMapRef`."""

    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.name}/{self.key}"


@dataclass(frozen=True)
class SuiteSeen:
    """What the controller read of a suite's ConfigMap: its content digest, or why none."""

    digest: str | None
    problem: str | None = None


def suite_ref(spec: Mapping[str, Any]) -> SuiteRef | None:
    """The ConfigMap key a check's spec (as JSON) reads its suite from; None for an inline
    suite or none."""
    ref = (spec.get("suite") or {}).get("configMapRef")
    if not ref:
        return None
    return SuiteRef(str(ref.get("name")), str(ref.get("key")))


def see_suite(ref: SuiteRef, config_map: Mapping[str, Any] | None) -> SuiteSeen:
    """The digest of the suite in `config_map` (its body as read; None: it does not exist)."""
    try:
        suite = config_map_suite(config_map, ref.name, ref.key)
    except SuiteError as error:
        return SuiteSeen(None, str(error))
    return SuiteSeen(suite.content_digest())


def unread_suites(
    manifests: Iterable[Mapping[str, Any]], seen: Mapping[SuiteRef, SuiteSeen]
) -> set[SuiteRef]:
    """The suites of checks about to be created that the controller has not read yet."""
    wanted = {suite_ref(m.get("spec") or {}) for m in manifests}
    return {ref for ref in wanted if ref is not None and ref not in seen}


def stamp_check(manifest: Mapping[str, Any], seen: Mapping[SuiteRef, SuiteSeen]) -> JSON:
    """`manifest` with its suite's content digest (when read) and the spec digest stamped."""
    stamped: JSON = copy.deepcopy(dict(manifest))
    spec = stamped["spec"]
    ref = suite_ref(spec)
    found = seen.get(ref) if ref is not None else None
    if found is not None and found.digest is not None:
        spec["suite"]["digest"] = found.digest
    metadata = stamped["metadata"]
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        ANNOTATION_SPEC_DIGEST: spec_digest(spec),
    }
    return stamped
