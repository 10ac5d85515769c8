"""An :class:`~gateway.security.access.Access` with API keys, JWTs (a JWKS file) and an ACL file,
built by :func:`gateway.security.access.access_for` from real files, for the listener's SASL,
ACL and metrics unit tests; and a real-socket listener over :class:`FakeService` with it.

Principals: ``User:alice`` (a JWT) may read the topics whose names start with ``t``;
``User:bob`` (a JWT) may only describe ``t``; ``User:ci`` (the API key) may read nothing.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from gateway.config import settings_for
from gateway.listener.server import KafkaListener
from gateway.security.access import Access, access_for
from tests.fakes.service import FakeService
from tests.fixtures.secured import AUDIENCE, ISSUER, write_security_files
from tests.fixtures.secured import token as signed
from tests.unit.listener.support import context, request

ACL = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=PREFIXED)`:
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
 \t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)

"""
SIGNING_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())


def token(sub: str, *, key: ec.EllipticCurvePrivateKey = SIGNING_KEY, **claims: Any) -> str:
    return signed(key, sub, **claims)


@dataclass(frozen=True)
class Secured:
    access: Access
    api_key: str
    settings_args: dict[str, Any]


async def secured(folder: Path) -> Secured:
    """The files under ``folder`` and the started :class:`Access` they describe."""
    files = write_security_files(folder, ACL, SIGNING_KEY)
    args: dict[str, Any] = {
        "jwt_issuer": ISSUER,
        "jwt_audience": AUDIENCE,
        "jwt_jwks_file": files.jwks_file,
        "jwt_algorithms": ["ES256"],
        "api_keys_file": files.api_keys_file,
        "acl_file": files.acl_file,
    }
    access = access_for(settings_for(store="file:///", workers=1, **args))
    await access.start()
    return Secured(access, files.api_keys["ci"], args)


@asynccontextmanager
async def secured_listener(
    folder: Path, service: FakeService | None = None
) -> AsyncIterator[tuple[KafkaListener, Secured]]:
    sec = await secured(folder)
    ctx = replace(context(service, port=0, **sec.settings_args), access=sec.access)
    listener = KafkaListener(ctx, "127.0.0.1", 10)
    await listener.start()
    try:
        yield listener, sec
    finally:
        await listener.close()


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(listener: KafkaListener) -> Conn:
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def send_frame(conn: Conn, payload: bytes) -> bytes:
    """Send one frame; its answer's payload."""
    reader, writer = conn
    writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def call(conn: Conn, message: Any, response_class: Any, version: int) -> Any:
    reply = await send_frame(conn, request(message))
    return response_class.decode(reply, version=version, header=True)


async def closed(reader: asyncio.StreamReader) -> bool:
    """The server closed the connection (end of stream, or reset), within 10 s."""
    try:
        return await asyncio.wait_for(reader.read(1), 10) == b""
    except ConnectionError:
        return True
