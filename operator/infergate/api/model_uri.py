"""Where model weights live: parse and check `spec.model.uri`.

Allowed forms (the CRD rule on `spec.model.uri` accepts exactly these):

- ``pvc://<claim>/<path>``: a PersistentVolumeClaim in the deployment's namespace;
- ``hf://<org>/<model>[@<revision>]``: a Hugging Face Hub repository, optionally pinned;
- ``s3://<bucket>/<key>``: object storage (vLLM streams it; MindFormers cannot);
- ``file:///<absolute path>``: a path on the node, mounted from the host.

Every form is refused when it could step out of the place it names: a `.` or
`..` path segment (also in an hf revision, which names a cache directory),
percent-encoding (nothing decodes it here, but a later reader might) or a
backslash. `file://` is a hostPath mount of the node's filesystem, so the
cluster admin lists the directories that may be mounted (`host_path_allowed`,
fed by the operator's `--allow-host-path` and by the admission policy's
parameters); the CRD cannot know that list, so it accepts the form and the
policy and the operator refuse what is not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class UriScheme(StrEnum):
    """Storage kinds a model can be loaded from."""

    PVC = "pvc"
    HF = "hf"
    S3 = "s3"
    FILE = "file"


# Shared with the CRD's CEL rule (RE2 syntax, which this also is).
MODEL_URI_PATTERN = (
    r"^(pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^/\s]+)*/?"
    r"|hf://[A-Za-z0-9][-._A-Za-z0-9]*(/[A-Za-z0-9][-._A-Za-z0-9]*)?(@[-._/A-Za-z0-9]+)?"
    r"|s3://[a-z0-9][-.a-z0-9]*[a-z0-9](/[^\s]*)?"
    r"|file:///[^\s]*)$"
)
# A `.` or `..` segment (after `/` or an hf `@revision`), any `%` escape or a backslash.
MODEL_URI_TRAVERSAL_PATTERN = r"(^|[/@])\.{1,2}([/@]|$)|%|\\"
MODEL_URI_TRAVERSAL_MESSAGE = (
    "uri must not contain '.' or '..' path segments, percent-encoding (%) or backslashes: "
    "weights are read from the path exactly as written"
)
MODEL_URI_FORMS = (
    "pvc://<claim>/<path>, hf://<org>/<model>[@<revision>], s3://<bucket>/<key> "
    "or file:///<absolute path>"
)
_PATTERN = re.compile(MODEL_URI_PATTERN)
_TRAVERSAL = re.compile(MODEL_URI_TRAVERSAL_PATTERN)


@dataclass(frozen=True)
class ModelLocation:
    """A parsed model URI."""

    scheme: UriScheme
    # pvc: the claim; s3: the bucket; hf: the repository id; file: empty.
    authority: str
    # Path inside the claim or bucket, or the absolute host path; empty for hf.
    path: str
    # hf only: the pinned revision (commit, tag or branch), or None.
    revision: str | None = None


def parse_model_uri(uri: str) -> ModelLocation:
    """Parse a model URI; the error names the field, the value and the allowed forms."""
    if not _PATTERN.match(uri):
        raise ValueError(f"model.uri: {uri!r} is not allowed; use {MODEL_URI_FORMS}")
    if _TRAVERSAL.search(uri):
        raise ValueError(f"model.uri: {uri!r} is not allowed; {MODEL_URI_TRAVERSAL_MESSAGE}")
    scheme_text, rest = uri.split("://", 1)
    scheme = UriScheme(scheme_text)
    if scheme is UriScheme.FILE:
        return ModelLocation(scheme, "", rest)
    if scheme is UriScheme.HF:
        repo, _, revision = rest.partition("@")
        return ModelLocation(scheme, repo, "", revision or None)
    authority, _, path = rest.partition("/")
    return ModelLocation(scheme, authority, path.rstrip("/"))


def parse_allow_list(text: str) -> tuple[str, ...]:
    """Entries of an allow-list written as comma- (or newline-) separated text, trimmed.

    The same format is read by the admission policies (`split(',')` in CEL) and by
    the operator's flags, from the `infergate-admission-params` ConfigMap.
    """
    return tuple(entry.strip() for entry in re.split(r"[,\n]", text) if entry.strip())


def host_path_allowed(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a host path lies in one of the allowed directories (whole segments only).

    `/data/models` allows `/data/models` and `/data/models/qwen`, never
    `/data/models-old`; only absolute prefixes count.
    """
    normal = path.rstrip("/") or "/"
    for prefix in prefixes:
        base = prefix.rstrip("/")
        if not prefix.startswith("/"):
            continue
        if base in ("", normal) or normal.startswith(base + "/"):
            return True
    return False


def check_host_path(uri: str, prefixes: tuple[str, ...]) -> None:
    """Refuse a file:// model URI outside the allowed host directories (others pass)."""
    location = parse_model_uri(uri)
    if location.scheme is not UriScheme.FILE or host_path_allowed(location.path, prefixes):
        return
    allowed = ", ".join(prefixes) if prefixes else "none (file:// is off)"
    raise ValueError(
        f"model.uri: {uri!r} is not allowed; file:// mounts a directory of the node, and only "
        f"these are allowed by the operator's --allow-host-path: {allowed}"
    )
