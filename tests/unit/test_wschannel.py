"""kubelet's WebSocket channel framing for exec (pure parts): subprotocol choice, the accept token, channel
messages both ways, binary and base64."""

from __future__ import annotations

import pytest

from edgelet.server import wschannel
from edgelet.server.routes import HttpError


@pytest.mark.parametrize("offered, chosen", [
    ("v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"),
    ("v4.base64.channel.k8s.io,channel.k8s.io", "v4.base64.channel.k8s.io"),
    ("x.example, base64.channel.k8s.io", "base64.channel.k8s.io"),
])
def test_negotiate_in_the_clients_order(offered, chosen):
    assert wschannel.negotiate([("Sec-WebSocket-Protocol", offered)]) == chosen


def test_negotiate_nothing_offered_is_v1_and_unknown_ones_are_refused():
    assert wschannel.negotiate([]) == ""
    with pytest.raises(HttpError) as err:
        wschannel.negotiate([("Sec-WebSocket-Protocol", "v9.channel.k8s.io")])
    assert err.value.status == 400


@pytest.mark.parametrize("sub, semantics", [("v5.channel.k8s.io", "v4.channel.k8s.io"),
                                            ("v4.base64.channel.k8s.io", "v4.channel.k8s.io"),
                                            ("channel.k8s.io", "channel.k8s.io"), ("", "channel.k8s.io")])
def test_exec_semantics(sub, semantics):
    assert wschannel.exec_protocol(sub) == semantics


def test_accept_token_is_rfc6455s():
    # RFC 6455's own example.
    assert wschannel.accept_token([("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]) == \
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    with pytest.raises(HttpError):
        wschannel.accept_token([("Sec-WebSocket-Key", "short")])


@pytest.mark.parametrize("text", [False, True])
def test_messages_round_trip(text):
    msg = wschannel.encode_message(1, b"\x00hi\xff", text=text)
    assert isinstance(msg, str) is text
    assert wschannel.decode_message(msg) == (1, b"\x00hi\xff")


@pytest.mark.parametrize("msg", [b"", "", "x123", "0***"])
def test_bad_messages(msg):
    with pytest.raises(ValueError):
        wschannel.decode_message(msg)


def test_websocket_upgrade_detection():
    assert wschannel.is_websocket_upgrade([("Connection", "Upgrade"), ("Upgrade", "websocket")])
    assert not wschannel.is_websocket_upgrade([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")])
