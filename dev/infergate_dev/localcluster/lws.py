"""The LeaderWorkerSet controller (sigs.k8s.io/lws) in the local cluster, when asked for.

`localcluster up --with lws` (or INFERGATE_LOCAL_LWS=1) starts the real controller, built
from its Go module (`hack/build-control-plane.sh lws-controller`, cached by version), so
rollouts of multi-node revisions meet the groups, statuses and restarts the real
controller makes. Most tests and the demo do not ask for it and do not pay for it.

Its webhooks stay on. They are not optional here: the pod webhook is what labels each pod
of a group with its group and worker index and gives every container LWS_LEADER_ADDRESS
(lws pkg/webhooks/pod_webhook.go); with ENABLE_WEBHOOKS=false pods would come up without
the labels a group's wholeness is judged on. The controller's own certificate rotation
(internalCertManagement) writes a Secret for an in-cluster Service the API server could not
reach here, so it is off: the serving certificate is signed by the local cluster's CA
(openssl, as the rest of the local PKI), for 127.0.0.1, and the webhook configurations
(the module's own config/webhook manifests, with the pod webhooks' objectSelector of its
kustomize patches) point the API server at that address with the CA as their caBundle.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from infergate_dev.localcluster import processes
from infergate_dev.localcluster.layout import LWS_VERSION, ClusterLayout, cache_dir
from infergate_dev.localcluster.pki import Pki, ensure_pki

NAME = "lws-controller"
ENV_FLAG = "INFERGATE_LOCAL_LWS"
_WEBHOOK_CERT = "lws-webhook"
_POD_SELECTOR = {
    "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
}
# (configuration kind, webhook name, path, resources, operations, objectSelector): as
# config/webhook/manifests.yaml of the module, with the pod webhooks' selector patches.
_WEBHOOKS: tuple[tuple[str, str, str, str, tuple[str, ...], dict[str, Any] | None], ...] = (
    (
        "MutatingWebhookConfiguration",
        "mleaderworkerset.kb.io",
        "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "leaderworkersets",
        ("CREATE", "UPDATE"),
        None,
    ),
    (
        "MutatingWebhookConfiguration",
        "mpod.kb.io",
        "/mutate--v1-pod",
        "pods",
        ("CREATE",),
        _POD_SELECTOR,
    ),
    (
        "ValidatingWebhookConfiguration",
        "vleaderworkerset.kb.io",
        "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
        "leaderworkersets",
        ("CREATE", "UPDATE"),
        None,
    ),
    (
        "ValidatingWebhookConfiguration",
        "vpod.kb.io",
        "/validate--v1-pod",
        "pods",
        ("CREATE", "UPDATE"),
        _POD_SELECTOR,
    ),
)
_CONFIG_NAME = "infergate-local-lws"


class LwsError(RuntimeError):
    """The LeaderWorkerSet controller could not be started."""


def lws_bin() -> Path:
    return cache_dir() / "bin" / f"lws-{LWS_VERSION}" / "lws-manager"


def wanted(with_lws: bool) -> bool:
    """Whether `up` starts the controller: asked on the command line or by the environment."""
    return with_lws or os.environ.get(ENV_FLAG, "") not in ("", "0", "false")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _serving_cert(pki: Pki, cert_dir: Path) -> None:
    """tls.crt/tls.key for 127.0.0.1, signed by the cluster CA (controller-runtime's names)."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    key, crt = cert_dir / "tls.key", cert_dir / "tls.crt"
    if crt.exists() and key.exists():
        return
    csr, ext = cert_dir / "tls.csr", cert_dir / "tls.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", "/CN=lws-webhook", "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey", str(pki.ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", "3650", "-sha256", "-extfile", str(ext),
    )  # fmt: skip
    csr.unlink()
    ext.unlink()


def webhook_configurations(port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The controller's webhook configurations, dialled at 127.0.0.1:`port`."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    group = {"leaderworkersets": "leaderworkerset.x-k8s.io", "pods": ""}
    for kind, name, path, resource, operations, selector in _WEBHOOKS:
        hook: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            },
            "rules": [
                {
                    "apiGroups": [group[resource]],
                    "apiVersions": ["v1"],
                    "operations": list(operations),
                    "resources": [resource],
                }
            ],
        }
        if selector is not None:
            hook["objectSelector"] = selector
        by_kind.setdefault(kind, []).append(hook)
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": _CONFIG_NAME},
            "webhooks": hooks,
        }
        for kind, hooks in by_kind.items()
    ]


def _kubectl(layout: ClusterLayout, *args: str, stdin: str | None = None) -> None:
    result = subprocess.run(
        [str(layout.bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise LwsError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")


def _serves(port: int, path: str, context: ssl.SSLContext | None) -> bool:
    scheme = "https" if context is not None else "http"
    try:
        url = f"{scheme}://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, context=context, timeout=2) as resp:  # noqa: S310 - loopback
            return bool(resp.status < 500)
    except urllib.error.HTTPError as error:
        return error.code < 500
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _own_kubeconfig(layout: ClusterLayout, pki: Pki) -> Path:
    """A kubeconfig of the admin's, with the controller's own client certificate: it acts
    under the user its release runs as, which the admission policies name."""
    ensure_pki(pki)
    config = yaml.safe_load(layout.kubeconfig.read_text())
    for entry in config["users"]:
        entry["user"] = {
            "client-certificate": str(pki.cert("lws-controller")),
            "client-key": str(pki.key("lws-controller")),
        }
    path = layout.root / "lws-controller.kubeconfig"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start(layout: ClusterLayout, *, say: bool = True) -> None:
    """Start the controller unless it runs; install its webhook configurations."""
    binary = lws_bin()
    if not binary.exists() or not (binary.parent / "crds").is_dir():
        raise LwsError(
            f"the LeaderWorkerSet controller is not built at {binary} (or without its crds/): run "
            "`hack/build-control-plane.sh lws-controller`"
        )
    state = layout.run / "lws-webhooks.json"
    if processes.running(layout.run, NAME) and state.exists():
        return
    pki = Pki(layout.pki)
    cert_dir = layout.pki / _WEBHOOK_CERT
    _serving_cert(pki, cert_dir)
    webhook, health = _free_port(), _free_port()
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
    }
    config_path = layout.root / "lws-config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    _kubectl(
        layout, "apply", "--server-side", "--force-conflicts", "-f", str(binary.parent / "crds")
    )
    _kubectl(layout, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    processes.start(
        layout.run,
        layout.logs,
        NAME,
        [str(binary), f"--config={config_path}", f"--kubeconfig={_own_kubeconfig(layout, pki)}"],
    )
    context = ssl.create_default_context(cafile=str(pki.ca_crt))
    started = time.monotonic()
    while not (_serves(health, "/readyz", None) and _serves(webhook, "/", context)):
        # (Its command line is ours only once it has exec'd: look after a second.)
        gone = time.monotonic() - started > 1 and not processes.running(layout.run, NAME)
        if time.monotonic() - started > 60 or gone:
            log = layout.logs / f"{NAME}.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise LwsError(f"the LeaderWorkerSet controller did not serve; {log}:\n{tail}")
        time.sleep(0.25)
    manifests = webhook_configurations(webhook, pki.ca_crt.read_bytes())
    _kubectl(layout, "apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
    state.write_text(json.dumps({"webhook": webhook, "health": health}))
    if say:
        print(f"started {NAME} {LWS_VERSION} (webhooks on 127.0.0.1:{webhook})", file=sys.stderr)


def stop(layout: ClusterLayout) -> bool:
    """Remove the webhook configurations (no LWS or group pod create may wait on a controller
    that is gone), then stop the controller; True if it was running."""
    state = layout.run / "lws-webhooks.json"
    if state.exists():
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            try:
                _kubectl(layout, "delete", kind, _CONFIG_NAME, "--ignore-not-found")
            except (LwsError, subprocess.TimeoutExpired) as error:
                print(f"note: {error}", file=sys.stderr)
        state.unlink(missing_ok=True)
    return processes.stop(layout.run, NAME)
