"""Certificates and keys of the local control plane, made with openssl.

One CA signs the API server's serving certificate and the client certificates
of the admin and the control-plane components; a separate RSA key signs
ServiceAccount tokens.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_DAYS = "3650"


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


# Client identities: (file name, CN, O). system:masters is the admin group; the
# component users have built-in RBAC bindings.
CLIENTS: tuple[tuple[str, str, str], ...] = (
    ("admin", "infergate-admin", "system:masters"),
    ("controller-manager", "system:kube-controller-manager", ""),
    ("scheduler", "system:kube-scheduler", ""),
    # KWOK and the local executor act as kubelets of their nodes; they are
    # trusted test infrastructure, so they get admin rights.
    ("nodes", "system:infergate-local-nodes", "system:masters"),
    # The LeaderWorkerSet controller, under the user name its release gives it (the
    # admission policies name it so: manifests/admission/managed-objects.yaml); admin rights
    # in place of the release's ClusterRole.
    ("lws-controller", "system:serviceaccount:lws-system:lws-controller-manager", "system:masters"),
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def ensure_pki(pki: Pki) -> None:
    """Create whatever of the CA, serving, client and SA keys is missing."""
    pki.dir.mkdir(parents=True, exist_ok=True)
    if not pki.ca_crt.exists():
        _openssl("genrsa", "-out", str(pki.ca_key), "2048")
        _openssl(
            "req", "-x509", "-new", "-nodes", "-key", str(pki.ca_key), "-sha256",
            "-days", _DAYS, "-subj", "/CN=infergate-local-ca", "-out", str(pki.ca_crt),
        )  # fmt: skip
    if not pki.cert("apiserver").exists():
        sans = (
            "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local"
        )
        _sign(pki, "apiserver", "/CN=kube-apiserver", extension=sans)
    for name, cn, org in CLIENTS:
        if not pki.cert(name).exists():
            subject = f"/CN={cn}" + (f"/O={org}" if org else "")
            _sign(pki, name, subject, extension="extendedKeyUsage=clientAuth")
    if not pki.sa_key.exists():
        _openssl("genrsa", "-out", str(pki.sa_key), "2048")
        _openssl("rsa", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))


def _sign(pki: Pki, name: str, subject: str, *, extension: str) -> None:
    key, csr, crt = pki.key(name), pki.dir / f"{name}.csr", pki.cert(name)
    ext = pki.dir / f"{name}.ext"
    ext.write_text(extension + "\n")
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_crt), "-CAkey", str(pki.ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", _DAYS, "-sha256", "-extfile", str(ext),
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
