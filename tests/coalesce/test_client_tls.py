"""Every Coalesce client of a process verifies TLS with one context, built once (httpx would read the CA bundle
into a new one for each client, and a client is built at each resource set-up: every sensor tick and run)."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi

from dw_dagster.coalesce import CoalesceClient

BASE_URL = "https://app.coalescesoftware.io"


def _tls(client: CoalesceClient) -> ssl.SSLContext:
    return client._http._transport._pool._ssl_context


def test_clients_share_one_verifying_context(monkeypatch, tmp_path):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first, second = CoalesceClient("t0ken", BASE_URL), CoalesceClient("t0ken", BASE_URL)
    assert _tls(first) is _tls(second)
    assert _tls(first).verify_mode == ssl.CERT_REQUIRED and _tls(first).check_hostname
    # httpx's trust_env: a CA bundle named by SSL_CERT_FILE makes another context, as httpx would.
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    third = CoalesceClient("t0ken", BASE_URL)
    assert _tls(third) is not _tls(first)
    assert _tls(CoalesceClient("t0ken", BASE_URL)) is _tls(third)
