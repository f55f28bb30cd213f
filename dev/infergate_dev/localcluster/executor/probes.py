"""Readiness, liveness and startup probes, checked the way a kubelet does."""

from __future__ import annotations

import socket
import subprocess

import httpx

from infergate.jsontypes import JSON
from infergate_dev.localcluster.executor.podspec import resolve_port


def check(probe: JSON, container: JSON, pod_ip: str, env: dict[str, str]) -> bool:
    """One probe attempt; True on success."""
    timeout = float(probe.get("timeoutSeconds", 1))
    if "httpGet" in probe:
        spec = probe["httpGet"]
        host = spec.get("host") or pod_ip
        port = resolve_port(container, spec["port"])
        scheme = spec.get("scheme", "HTTP").lower()
        headers = {h["name"]: h["value"] for h in spec.get("httpHeaders") or []}
        url = f"{scheme}://{host}:{port}{spec.get('path', '/')}"
        try:
            response = httpx.get(url, headers=headers, timeout=timeout, verify=False)  # noqa: S501 - probes skip TLS checks, as the kubelet does
        except httpx.HTTPError:
            return False
        return 200 <= response.status_code < 400
    if "tcpSocket" in probe:
        spec = probe["tcpSocket"]
        port = resolve_port(container, spec["port"])
        try:
            with socket.create_connection((spec.get("host") or pod_ip, port), timeout=timeout):
                return True
        except OSError:
            return False
    if "exec" in probe:
        try:
            result = subprocess.run(
                probe["exec"]["command"], env=env, capture_output=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return result.returncode == 0
    return True
