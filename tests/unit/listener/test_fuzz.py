"""Hypothesis over request bytes: whatever a client sends, the listener answers a frame or
refuses with :class:`MalformedRequestError` (its connection is then closed); nothing else
escapes. Both random bytes and valid requests with bytes flipped, cut or appended."""

from __future__ import annotations

import asyncio
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from gateway.listener.dispatch import answer
from gateway.listener.framing import MalformedRequestError
from tests.unit.listener.support import TOPIC, context, request, unframe

FETCH_V4_FIELDS = (
    "replica_id",
    "max_wait_ms",
    "min_bytes",
    "max_bytes",
    "isolation_level",
    "topics",
)


def _valid() -> list[bytes]:
    f = FetchRequest[12]
    fetch = f(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1000, isolation_level=1,
              session_id=0, session_epoch=-1, topics=[f.FetchTopic(topic=TOPIC, partitions=[
                  f.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                              partition_max_bytes=500)])],
              forgotten_topics_data=[], rack_id="")  # fmt: skip
    lo = ListOffsetsRequest[7]
    offsets = lo(replica_id=-1, isolation_level=0, topics=[lo.ListOffsetsTopic(name=TOPIC,
                 partitions=[lo.ListOffsetsTopic.ListOffsetsPartition(partition_index=0,
                                                                      timestamp=-1)])])  # fmt: skip
    return [
        request(fetch),
        request(FetchRequest[4](**{k: getattr(fetch, k) for k in FETCH_V4_FIELDS})),
        request(offsets),
        request(MetadataRequest[12](topics=None)),
        request(ApiVersionsRequest[3](client_software_name="x", client_software_version="1")),
    ]


VALID = _valid()


def _check(payload: bytes) -> None:
    try:
        reply = asyncio.run(answer(context(request_timeout_ms=20), payload))  # short holds
    except MalformedRequestError:
        return
    assert reply is not None
    reply.release()
    assert struct.unpack(">i", unframe(reply)[:4])[0] == struct.unpack(">i", payload[4:8])[0]


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes(payload: bytes) -> None:
    _check(payload)


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 10_000),
    st.binary(max_size=16),
)
def test_mutated_requests(base: bytes, flips: list[tuple[int, int]], cut: int, tail: bytes) -> None:
    data = bytearray(base)
    for at, value in flips:
        data[at % len(data)] = value
    _check(bytes(data[: max(8, len(data) - cut % len(data))]) + tail)
