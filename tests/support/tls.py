"""Throwaway CAs and certificates for hosts served over TLS (openssl, like the local cluster's).

``Pki(root)``: ``ca(name)`` makes a CA once; ``host_tls(server_ca, client_ca=None)`` gives a
``HostTls`` whose serving certificate (for 127.0.0.1) is signed by `server_ca` and, with
`client_ca`, requires client certificates signed by it (the test's own clients get one).
"""

from __future__ import annotations

from pathlib import Path

from fixtures_kube import localcluster
from processes import HostTls


class Pki:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ca(self, name: str) -> Path:
        """The certificate of CA `name` (made on first use)."""
        crt = self.root / name / "ca.crt"
        if not crt.exists():
            localcluster.make_ca(self.root / name, f"/CN={name}")
        return crt

    def client(self, ca: str, name: str = "client") -> tuple[Path, Path]:
        """A client certificate and key signed by CA `ca`."""
        self.ca(ca)
        return localcluster.signed_cert(
            self.root / ca, name, f"/CN={name}", localcluster.CLIENT_CERT
        )

    def host_tls(self, server_ca: str, client_ca: str | None = None) -> HostTls:
        self.ca(server_ca)
        cert, key = localcluster.signed_cert(
            self.root / server_ca, "host", "/CN=127.0.0.1", localcluster.server_cert("127.0.0.1")
        )
        if client_ca is None:
            return HostTls(cert, key, self.ca(server_ca))
        return HostTls(
            cert, key, self.ca(server_ca), self.ca(client_ca), self.client(client_ca, "tests")
        )
