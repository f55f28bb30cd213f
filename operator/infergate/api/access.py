"""What an InferenceDeployment may reach outside its namespace's own objects, and who says so.

Two things would give the author of an InferenceDeployment more than creating one
should: a `file://` model (a hostPath mount of the node's filesystem) and an engine
ServiceAccount (the powers of any account in the namespace). Both are allowed only
where a cluster admin says so, at two levels:

- the operator's ceiling, for the whole cluster: `infergate operator
  --allow-host-path PREFIX` (repeatable; none: `file://` is refused everywhere);
- each namespace's share, as annotations on the Namespace object (which namespace
  admins cannot edit under Kubernetes' default roles), read by the admission
  policies in manifests/admission through `namespaceObject`:

  - `infergate.io/allowed-host-paths`: node directories `file://` models may name;
  - `infergate.io/engine-service-accounts`: ServiceAccounts of the namespace engine
    pods may run as (else only `default`).

Lists are comma- (or newline-) separated. A directory allows itself and what is
below it, by whole path segments: `/data/models` allows `/data/models/qwen`, never
`/data/models-old`.
"""

from __future__ import annotations

import re

from infergate.api.base import GROUP
from infergate.api.model_uri import UriScheme, parse_model_uri

ALLOWED_HOST_PATHS_ANNOTATION = f"{GROUP}/allowed-host-paths"
ENGINE_SERVICE_ACCOUNTS_ANNOTATION = f"{GROUP}/engine-service-accounts"


def parse_allow_list(text: str) -> tuple[str, ...]:
    """Entries of an allow-list written as comma- (or newline-) separated text, trimmed.

    The admission policies read the same format (`split(',')` in CEL).
    """
    return tuple(entry.strip() for entry in re.split(r"[,\n]", text) if entry.strip())


def host_path_allowed(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a host path lies in one of the allowed directories (whole segments only)."""
    normal = path.rstrip("/") or "/"
    for prefix in prefixes:
        if not prefix.startswith("/"):
            continue
        base = prefix.rstrip("/")
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
        f"these are allowed: {allowed}"
    )


def service_account_allowed(name: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether engine pods may run as ServiceAccount `name` (None or default always may)."""
    return name in (None, "default") or name in allowed
