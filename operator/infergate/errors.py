"""The operator's errors: what went wrong, and whether trying again can help.

```
InfergateError                  anything the operator raises on purpose
├── SpecError                   the InferenceDeployment asks for something that cannot be done
├── NotLeaderError              a write refused: this replica no longer holds the leader Lease
└── KubeError                   the API server refused or failed a request
    ├── RetriableKubeError      409, 429, 5xx, timeouts, broken connections: try again later
    │   └── ConflictError       409 Conflict: the object changed under us (stale resourceVersion)
    │       └── StaleObjectError  the owner's status write found it changed: nothing was written
    └── PermanentKubeError      any other 4xx: the request itself is wrong; retrying repeats it
        ├── NotFoundError       404: the object (or its namespace) does not exist
        ├── ForbiddenError      403: the operator's ServiceAccount lacks a permission
        └── AlreadyExistsError  409 AlreadyExists: a create found the name taken
```

Controllers turn `SpecError` and `PermanentKubeError` into `kopf.PermanentError`
and `RetriableKubeError` into `kopf.TemporaryError`; nothing retries forever. Every
client of the API server (the operator's, the runner's, the local cluster's) maps an
answer to these classes through `error_for_status`, and retries through
`infergate.retry`, so one status means the same thing everywhere.
"""

from __future__ import annotations


class InfergateError(Exception):
    """Base of every error the operator raises on purpose."""


class SpecError(InfergateError):
    """A spec the operator cannot act on; the message names the object, field and value."""


class NotLeaderError(InfergateError):
    """A write refused before it was sent: this replica's leadership lapsed (`kube.fence`).
    Not a failure to retry: the reconcile stops and writes nothing more."""


class KubeError(InfergateError):
    """A request to the API server failed; `status` is the HTTP status (0: no response).

    `retry_after` is the server's Retry-After (seconds) when it sent one (429, 503).
    """

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class RetriableKubeError(KubeError):
    """A failure that may pass on its own (conflict, throttling, server or network trouble)."""


class ConflictError(RetriableKubeError):
    """409 Conflict: a stale resourceVersion; read again and retry."""


class StaleObjectError(ConflictError):
    """409 on the status write that opens a reconcile's writes: the object changed since the
    copy the decision was made from, and nothing else was written; decide again from a
    fresh read."""


class PermanentKubeError(KubeError):
    """A 4xx answer other than 409/429: the request is wrong and would fail again."""


class NotFoundError(PermanentKubeError):
    """404: the object or its namespace does not exist."""


class ForbiddenError(PermanentKubeError):
    """403: RBAC refused the request; the message names the verb and resource."""


class AlreadyExistsError(PermanentKubeError):
    """409 AlreadyExists: a create found an object of that name; whose it is, the caller
    must check (never assume an existing object is one's own)."""


def error_for_status(
    status: int, message: str, *, reason: str = "", retry_after: float | None = None
) -> KubeError:
    """The error an API answer with this HTTP status stands for (0: no answer at all).

    `reason` is the Status object's reason (metav1.StatusReason, e.g. AlreadyExists),
    which tells the two kinds of 409 apart.
    """
    kind: type[KubeError]
    if status == 409 and reason == "AlreadyExists":
        kind = AlreadyExistsError
    elif status == 404:
        kind = NotFoundError
    elif status == 403:
        kind = ForbiddenError
    elif status == 409:
        kind = ConflictError
    elif status == 429 or status >= 500 or status == 0:
        kind = RetriableKubeError
    else:
        kind = PermanentKubeError
    return kind(message, status=status, reason=reason, retry_after=retry_after)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header given in seconds; None when absent or a date.

    The API server sends whole seconds (apiserver's priority and fairness, 429); an
    HTTP date is legal but never sent by it, and then the client's own backoff applies.
    """
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
