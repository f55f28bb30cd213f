"""Names and labels of what a ParityCheck starts: runner Job, its RBAC, probes, report.

Pure; used by the controller that renders the children and by the runner that finds
them. Every child in the check's namespace is named after its check and labelled with
it, so the controller finds them by label and the runner finds the probe Services by
name. Names that would pass the 63-character DNS label limit (Services, Jobs' pod
labels) are cut and given a hash of the full name, so two long check names never collide.

The runner's Job, ServiceAccount and NetworkPolicy live in the runner namespace (the
operator's), shared by the checks of every namespace: they are named after the check's
uid, unique across namespaces and across a check deleted and made again under its name,
and labelled with the check's namespace, name and uid (owner references cannot cross
namespaces; no tenant can write there, so these labels are the operator's word).
"""

from __future__ import annotations

import hashlib
from typing import Literal

from infergate.api.base import GROUP

SideName = Literal["baseline", "candidate"]
SIDES: tuple[SideName, SideName] = ("baseline", "candidate")

LABEL_CHECK = f"{GROUP}/paritycheck"
LABEL_ROLE = f"{GROUP}/paritycheck-role"
LABEL_SIDE = f"{GROUP}/side"
LABEL_CHECK_NAMESPACE = f"{GROUP}/paritycheck-namespace"
"""On runner objects in the runner namespace: the namespace of their check."""
LABEL_CHECK_UID = f"{GROUP}/paritycheck-uid"
"""On runner objects in the runner namespace: the uid of their check (their owner)."""
DEFAULT_RUNNER_NAMESPACE = "infergate-system"
"""Where runner Jobs run unless `infergate operator --runner-namespace` says otherwise:
the namespace manifests/operator installs the operator in."""
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "infergate"
ROLE_RUNNER = "runner"
ROLE_PROBE = "probe"
REPORT_HTML_KEY = "report.html"
REPORT_HTML_GZIP_KEY = "report.html.gz"
REPORT_JSON_KEY = "result.json"

_DNS_LABEL_MAX = 63
_HASH_LEN = 6


def child_name(check: str, suffix: str) -> str:
    """`<check>-<suffix>`, cut to a DNS label with a hash of the whole when too long."""
    full = f"{check}-{suffix}"
    if len(full) <= _DNS_LABEL_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_LEN]
    keep = _DNS_LABEL_MAX - len(suffix) - _HASH_LEN - 2
    return f"{check[:keep].rstrip('-')}-{digest}-{suffix}"


def runner_name(check: str) -> str:
    """Name of the runner's Role and RoleBinding in the check's namespace."""
    return child_name(check, "runner")


def runner_account_name(check_uid: str) -> str:
    """Name of the runner's Job, ServiceAccount and NetworkPolicy in the runner namespace:
    `check-<uid>-runner` (49 characters for a Kubernetes uid; the status admission policy
    checks this form)."""
    return f"check-{check_uid}-{ROLE_RUNNER}"


def probe_name(check: str, side: SideName) -> str:
    """Name of the hidden-state probe Pod and Service of one side."""
    return child_name(check, f"probe-{side}")


def report_name(check: str) -> str:
    """Name of the ConfigMap holding the full report."""
    return child_name(check, "report")


def role_labels(role: str) -> dict[str, str]:
    """Labels every check's children of `role` share, whatever their check."""
    return {LABEL_ROLE: role, LABEL_COMPONENT: f"parity-{role}", LABEL_MANAGED_BY: MANAGED_BY}


def child_labels(check: str, role: str) -> dict[str, str]:
    """Labels of every child of a check; `role` is runner or probe."""
    return {LABEL_CHECK: check_label_value(check), **role_labels(role)}


def runner_labels(namespace: str, check: str, uid: str) -> dict[str, str]:
    """Labels of the runner's objects in the runner namespace (and of its pods): the
    check's children labels, with the check's namespace and uid, which tell the checks of
    two namespaces apart there and say whose the objects are."""
    return {
        **child_labels(check, ROLE_RUNNER),
        LABEL_CHECK_NAMESPACE: namespace,
        LABEL_CHECK_UID: uid,
    }


def check_selector(check: str) -> str:
    """Label selector of a check's children."""
    return f"{LABEL_CHECK}={check_label_value(check)}"


def check_label_value(value: str) -> str:
    """A check's name as a label value: cut to 63 characters with a hash when longer."""
    if len(value) <= _DNS_LABEL_MAX:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:_HASH_LEN]
    return f"{value[: _DNS_LABEL_MAX - _HASH_LEN - 1].rstrip('-.')}-{digest}"
