"""The minimal grpc health client: framing and protobuf by table, and against a real grpcio server when one is installed."""

from __future__ import annotations

import asyncio

import pytest

from edgelet.api.types import GRPCAction
from edgelet.probes.grpc import check_request, grpc_probe, hpack_int, parse_status
from edgelet.probes.machine import Result
from edgelet.probes.probers import ProbeTarget

HOST = ProbeTarget(container_id="c", netns=None)


@pytest.mark.parametrize("value, prefix, expected", [(10, 5, b"\x0a"), (1337, 5, b"\x1f\x9a\x0a"), (42, 8, b"\x2a")])
def test_hpack_integers_rfc7541_examples(value, prefix, expected):
    assert hpack_int(value, prefix) == expected


@pytest.mark.parametrize(
    "message, status",
    [
        (b"\x00\x00\x00\x00\x02\x08\x01", 1),
        (b"\x00\x00\x00\x00\x02\x08\x02", 2),
        (b"\x00\x00\x00\x00\x00", 0),  # proto3 default: UNKNOWN
        (b"\x01\x00\x00\x00\x02\x08\x01", None),  # compressed: not understood
    ],
)
def test_parse_status(message, status):
    assert parse_status(message) == status


def test_check_request():
    assert check_request("") == b"\x00\x00\x00\x00\x00"
    assert check_request("db") == b"\x00\x00\x00\x00\x04\x0a\x02db"


def test_refused_is_failure():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await grpc_probe(GRPCAction(port=port), HOST, 1.0)

    out = asyncio.run(main())
    assert out.result == Result.FAILURE and "failed to connect service" in out.message


@pytest.mark.parametrize(
    "service, expected, message",
    [
        ("", Result.SUCCESS, ""),
        ("down", Result.FAILURE, 'service unhealthy (responded with "NOT_SERVING")'),
        # NOT_FOUND; grpcio sends an empty message before the trailers, other servers send trailers only.
        ("unknown-service", Result.FAILURE, "service unhealthy"),
    ],
)
def test_against_grpcio_health_server(service, expected, message):
    grpc = pytest.importorskip("grpc")
    health = pytest.importorskip("grpc_health.v1.health")
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set("down", health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        out = asyncio.run(grpc_probe(GRPCAction(port=port, service=service or None), HOST, 2.0))
    finally:
        server.stop(0).wait()
    assert out.result == expected
    assert message in out.message
