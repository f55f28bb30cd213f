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
cluster admin lists the directories that may be mounted (`infergate.api.access`):
the CRD cannot know that list, so it accepts the form, and the admission policy
and the operator refuse what is not listed.
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
    # fullmatch, as RE2 matches the CRD's pattern: Python's `$` also passes a final newline.
    if not _PATTERN.fullmatch(uri):
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
