"""The real kube-apiserver harness the apiserver tests stand on: TLS, tokens, Node,RBAC and NodeRestriction."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.apiserver


def test_admin_reaches_the_api_over_tls(apiserver):
    # The bootstrap controller creates the system namespaces shortly after /readyz: wait for them.
    wanted = {"default", "kube-system", "kube-node-lease"}
    deadline = time.monotonic() + 60
    while True:
        names = {n["metadata"]["name"] for n in apiserver.get("/api/v1/namespaces")["items"]}
        if wanted <= names or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert wanted <= names
    assert "v1.20" in apiserver.kubectl("version", "-o", "json")


def test_a_node_identity_is_held_to_node_authorization(apiserver):
    # The run's one apiserver (tests/conftest.py): its edge-1 token was issued before the start, and the
    # Node made here goes at the end, leaving the server as the e2e tests expect it.
    token = apiserver.node_token("edge-1")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}}
    status, body = apiserver.request("POST", "/api/v1/nodes", node, token=token)
    assert status == 201, body
    try:
        _held_to_its_own_node(apiserver, token)
    finally:
        apiserver.request("DELETE", "/api/v1/nodes/edge-1")


def _held_to_its_own_node(apiserver, token: str) -> None:
    # Another node's object and cluster-wide secrets are out of its reach.
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-2"}}
    assert apiserver.request("POST", "/api/v1/nodes", other, token=token)[0] == 403
    assert apiserver.request("GET", "/api/v1/secrets", token=token)[0] == 403
    # No token at all: 401, never anonymous access to objects.
    assert apiserver.request("GET", "/api/v1/nodes", token="wrong")[0] == 401
    assert json.loads(apiserver.request("GET", "/api/v1/nodes/edge-1", token=token)[1])["metadata"]["uid"]


def test_an_etcd_port_taken_before_etcd_binds_it_is_chosen_again(tmp_path, monkeypatch):
    # Ports are free when chosen, not when etcd binds them: another test process may take one meanwhile.
    import socket

    from edgelet.testing import apiserver as harness

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    chosen = iter([[taken.getsockname()[1], harness.free_port()]])
    real = harness.free_ports
    monkeypatch.setattr(harness, "free_ports", lambda n: (n == 2 and next(chosen, None)) or real(n))
    api = harness.ApiServer(tmp_path / "api", harness.kube_bin_dir())
    try:
        api.start()
        assert api.get("/readyz", raw=True) == b"ok"
        assert "address already in use" in (tmp_path / "api" / "logs" / "etcd.log").read_text()
    finally:
        api.stop()
        taken.close()
