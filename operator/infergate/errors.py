"""The operator's errors: what went wrong, and whether trying again can help.

```
InfergateError                  anything the operator raises on purpose
├── SpecError                   the InferenceDeployment asks for something that cannot be done
└── KubeError                   the API server refused or failed a request
    ├── RetriableKubeError      409, 429, 5xx, timeouts, broken connections: try again later
    │   └── ConflictError       409: the object changed under us (or already exists)
    └── PermanentKubeError      any other 4xx: the request itself is wrong; retrying repeats it
        ├── NotFoundError       404: the object (or its namespace) does not exist
        └── ForbiddenError      403: the operator's ServiceAccount lacks a permission
```

Controllers turn `SpecError` and `PermanentKubeError` into `kopf.PermanentError`
and `RetriableKubeError` into `kopf.TemporaryError`; nothing retries forever.
"""

from __future__ import annotations


class InfergateError(Exception):
    """Base of every error the operator raises on purpose."""


class SpecError(InfergateError):
    """A spec the operator cannot act on; the message names the object, field and value."""


class KubeError(InfergateError):
    """A request to the API server failed; `status` is the HTTP status (0: no response)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class RetriableKubeError(KubeError):
    """A failure that may pass on its own (conflict, throttling, server or network trouble)."""


class ConflictError(RetriableKubeError):
    """409: a stale resourceVersion, or a create of an object that already exists."""


class PermanentKubeError(KubeError):
    """A 4xx answer other than 409/429: the request is wrong and would fail again."""


class NotFoundError(PermanentKubeError):
    """404: the object or its namespace does not exist."""


class ForbiddenError(PermanentKubeError):
    """403: RBAC refused the request; the message names the verb and resource."""
