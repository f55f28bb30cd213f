"""A small client of the Kubernetes REST API for the local cluster's own tools.

The local executor and the bootstrap act as node agents of a test cluster;
they need a handful of verbs on plain JSON, from a kubeconfig with client
certificates. (The operator's own API access lives in `infergate.kube`.)
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

JSON = dict[str, Any]


class ApiError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:500]}")
        self.status = status


class RestClient:
    def __init__(self, kubeconfig: Path, timeout: float = 30.0) -> None:
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
        response = self._client.request(
            method,
            path,
            params=params,
            content=json.dumps(body) if body is not None else None,
            headers={"Content-Type": content_type} if body is not None else None,
        )
        if ok_missing and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ApiError(response.status_code, response.text, f"{method} {path}")
        data: JSON = response.json()
        return data

    def get(self, path: str, **params: str) -> JSON | None:
        return self.request("GET", path, params=params or None, ok_missing=True)

    def list(self, path: str, **params: str) -> list[JSON]:
        data = self.request("GET", path, params=params or None) or {}
        items: list[JSON] = data.get("items") or []
        return items

    def create(self, path: str, body: JSON) -> JSON:
        data = self.request("POST", path, body=body)
        if data is None:
            raise ApiError(404, "", f"POST {path}")
        return data

    def merge_patch(self, path: str, body: JSON) -> JSON | None:
        return self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json", ok_missing=True
        )

    def delete(self, path: str, body: JSON | None = None) -> None:
        self.request("DELETE", path, body=body, ok_missing=True)

    def watch(self, path: str, timeout_seconds: int = 30, **params: str) -> Iterator[JSON]:
        query = {"watch": "true", "timeoutSeconds": str(timeout_seconds), **params}
        with self._client.stream(
            "GET", path, params=query, timeout=timeout_seconds + 10
        ) as response:
            if response.status_code >= 400:
                raise ApiError(response.status_code, response.read().decode(), f"WATCH {path}")
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)
