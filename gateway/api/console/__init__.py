"""The history console at ``/ui`` (docs/console.md): server-rendered pages over the same
service, principals and ACLs as the API, with one small script and a strict
Content-Security-Policy. :func:`router` is what the app mounts."""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qs

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.api.console import routes, scans, web

__all__ = ["router"]

_LIMIT: Final = 4096  # the largest sign-in form accepted


def router() -> APIRouter:
    r = APIRouter(prefix=web.PREFIX, include_in_schema=False)
    topic = "/topics/{topic}"
    part = topic + "/{partition}"
    add = r.add_api_route
    add("/", web.guarded(routes.index), methods=["GET"])
    add(topic, web.guarded(routes.topic_page), methods=["GET"])
    add(topic + "/lookup", web.guarded(scans.lookup), methods=["GET"])
    add(part, web.guarded(routes.partition_page), methods=["GET"])
    add(part + "/records/{offset}", web.guarded(routes.record_page), methods=["GET"])
    add(part + "/search", web.guarded(scans.search_page), methods=["GET"])
    add(part + "/download", web.guarded(_download), methods=["GET"])
    add(part + "/download.sha256", web.guarded(_digest), methods=["GET"])
    add("/static/{name}", _static, methods=["GET"])
    add("/login", _login_form, methods=["GET"])
    add("/login", _login, methods=["POST"])
    add("/logout", _logout, methods=["POST"])
    return r


async def _download(request: Request, topic: str, partition: int) -> Response:
    return await scans.download(request, topic, partition, digest=False)


async def _digest(request: Request, topic: str, partition: int) -> Response:
    return await scans.download(request, topic, partition, digest=True)


async def _static(name: str) -> Response:
    return web.static(name)


async def _login_form(request: Request) -> Response:
    target = web.safe_next(request.query_params.get("next"))
    return web.page("login.html", title="Sign in", next=target, failed=False)


async def _login(request: Request) -> Response:
    body = await request.body()
    form = parse_qs(body[:_LIMIT].decode("utf-8", "replace")) if len(body) <= _LIMIT else {}
    secret = (form.get("secret") or [""])[0].strip()
    kind = (form.get("kind") or ["key"])[0]
    target = web.safe_next((form.get("next") or [""])[0])
    if not secret or not await web.accepted(request, kind, secret):
        return web.page("login.html", 401, title="Sign in", next=target, failed=True)
    secure = request.url.scheme == "https"
    return web.signed_in(secret, kind, secure=secure, target=target)


async def _logout() -> Response:
    return web.signed_out()
