"""A small client of the Kubernetes REST API for the local cluster's own tools.

The local executor and the bootstrap act as node agents of a test cluster;
they need a handful of verbs on plain JSON, from a kubeconfig with client
certificates. (The operator's own API access lives in `infergate.kube`.)

Failures are the operator's own errors (`infergate.errors.error_for_status`: 409, 429,
5xx and no answer retriable, other 4xx permanent), and retriable ones are retried
under the one policy of `infergate.retry` (backoff with jitter, Retry-After honoured).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from infergate.errors import NotFoundError, error_for_status, parse_retry_after
from infergate.jsontypes import JSON
from infergate.retry import API_WRITES, RetryPolicy, retry_call

_BODY_IN_MESSAGE = 500


def _status_reason(response: httpx.Response) -> str:
    """The reason of a Status answer (e.g. AlreadyExists), "" when the body is not one."""
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("reason") or "") if isinstance(body, dict) else ""


class RestClient:
    def __init__(
        self, kubeconfig: Path, timeout: float = 30.0, retry: RetryPolicy = API_WRITES
    ) -> None:
        self.retry = retry
        config = yaml.safe_load(kubeconfig.read_text())
        context_name = config["current-context"]
        context = next(c for c in config["contexts"] if c["name"] == context_name)["context"]
        cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
        user = next(u for u in config["users"] if u["name"] == context["user"])["user"]
        self.server: str = cluster["server"]
        self.ca_file: str = cluster["certificate-authority"]
        context = ssl.create_default_context(cafile=self.ca_file)
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        self._client = httpx.Client(base_url=self.server, verify=context, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: JSON | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        ok_missing: bool = False,
    ) -> JSON | None:
        what = f"{method} {path}"

        def once() -> JSON:
            try:
                response = self._client.request(
                    method,
                    path,
                    params=params,
                    content=json.dumps(body) if body is not None else None,
                    headers={"Content-Type": content_type} if body is not None else None,
                )
            except httpx.HTTPError as error:
                raise error_for_status(0, f"{what}: no answer: {error}") from error
            if response.status_code >= 400:
                raise error_for_status(
                    response.status_code,
                    f"{what}: HTTP {response.status_code}: {response.text[:_BODY_IN_MESSAGE]}",
                    reason=_status_reason(response),
                    retry_after=parse_retry_after(response.headers.get("Retry-After")),
                )
            data: JSON = response.json()
            return data

        try:
            return retry_call(once, self.retry)
        except NotFoundError:
            if ok_missing:
                return None
            raise

    def get(self, path: str, **params: str) -> JSON | None:
        return self.request("GET", path, params=params or None, ok_missing=True)

    def list(self, path: str, **params: str) -> list[JSON]:
        data = self.request("GET", path, params=params or None) or {}
        items: list[JSON] = data.get("items") or []
        return items

    def create(self, path: str, body: JSON) -> JSON:
        data = self.request("POST", path, body=body)
        if data is None:
            raise error_for_status(404, f"POST {path}: HTTP 404")
        return data

    def merge_patch(self, path: str, body: JSON) -> JSON | None:
        return self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json", ok_missing=True
        )

    def strategic_patch(self, path: str, body: JSON) -> JSON | None:
        """A strategic merge patch: a pod's status.conditions merge by type, so a condition
        someone else owns (a readiness gate's) is kept."""
        return self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/strategic-merge-patch+json",
            ok_missing=True,
        )

    def delete(self, path: str, body: JSON | None = None) -> None:
        self.request("DELETE", path, body=body, ok_missing=True)

    def watch(self, path: str, timeout_seconds: int = 30, **params: str) -> Iterator[JSON]:
        query = {"watch": "true", "timeoutSeconds": str(timeout_seconds), **params}
        with self._client.stream(
            "GET", path, params=query, timeout=timeout_seconds + 10
        ) as response:
            if response.status_code >= 400:
                text = response.read().decode()[:_BODY_IN_MESSAGE]
                raise error_for_status(
                    response.status_code, f"WATCH {path}: HTTP {response.status_code}: {text}"
                )
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)
