"""The console's plumbing: templates, security headers, sign-in, query parameters, errors.

Every page is rendered by Jinja2 with autoescaping on, so a key, value, header or name that
carries markup is shown as text in element content and attributes; URLs are built with
:func:`url` (each query value percent-encoded) and the one script reads nothing but
``data-*`` attributes. Every answer carries a Content-Security-Policy that allows only the
gateway's own script, style sheet and forms, and no framing.

Sign-in: a browser cannot send ``X-API-Key`` or a bearer token by itself, so ``/ui/login``
keeps the one the user pastes in an HttpOnly, SameSite=Strict cookie scoped to ``/ui`` (Secure
over TLS); the console authenticates it exactly as the API authenticates the header (mTLS
clients need no sign-in). Pages ask ``Describe`` on a topic and records ``Read``, as the API.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any, Final

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.api.auth import access_of, client_host, credentials
from gateway.api.errors import error_body
from gateway.api.statuses import http_status
from gateway.errors import AuthenticationError, GatewayError, InvalidRequestError
from gateway.security.access import Credentials

log = logging.getLogger(__name__)

COOKIE: Final = "tg_console"
PREFIX: Final = "/ui"
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
_STATIC: Final = {
    "console.js": "text/javascript",
    "console.css": "text/css",
    "favicon.svg": "image/svg+xml",
}

templates: Final = Environment(
    loader=PackageLoader("gateway.api.console"),
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def url(path: str, **query: object) -> str:
    """``/ui`` + ``path`` with ``query`` percent-encoded (None and "" left out)."""
    pairs = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    tail = f"?{urllib.parse.urlencode(pairs)}" if pairs else ""
    return f"{PREFIX}{path}{tail}"


def segment(text: str) -> str:
    """A path segment, percent-encoded."""
    return urllib.parse.quote(text, safe="")


templates.globals.update(url=url, segment=segment)


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(
        templates.get_template(name).render(**context), status_code=status, headers=HEADERS
    )


def static(name: str) -> Response:
    media = _STATIC.get(name)
    if media is None:
        return page("error.html", 404, title="Not found", error={"message": "no such file"})
    body = resources.files("gateway.api.console").joinpath("static", name).read_bytes()
    return Response(body, media_type=media, headers={**HEADERS, "Cache-Control": "max-age=300"})


def error_page(request: Request, exc: GatewayError) -> Response:
    if isinstance(exc, AuthenticationError) and not access_of(request).open:
        return RedirectResponse(url("/login", next=request.url.path), status_code=303)
    body = error_body(exc)
    headers = dict(HEADERS)
    if body.get("retriable"):
        headers["Retry-After"] = "1"
    return HTMLResponse(
        templates.get_template("error.html").render(title="Error", error=body),
        status_code=http_status(exc),
        headers=headers,
    )


Handler = Callable[..., Awaitable[Response]]


def guarded(handler: Handler) -> Handler:
    """``handler`` with a gateway error shown as a page of its status (sign-in when
    authentication is missing or failed)."""

    @functools.wraps(handler)
    async def run(request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(request, *args, **kwargs)
        except GatewayError as exc:
            return error_page(request, exc)

    return run


def _with_secret(creds: Credentials, kind: str, secret: str) -> Credentials:
    if kind == "bearer":
        return dataclasses.replace(creds, authorization=f"Bearer {secret}")
    return dataclasses.replace(creds, api_key=secret)


async def principal(request: Request) -> str:
    """Who the request is: its headers or TLS certificate, else the console's cookie."""
    access = access_of(request)
    creds = credentials(request)
    saved = request.cookies.get(COOKIE)
    if saved and creds.authorization is None and creds.api_key is None:
        kind, _, secret = saved.partition(":")
        creds = _with_secret(creds, kind, secret)
    who = await access.authenticate(creds)
    request.state.principal = who  # for the audit line
    access.limit(who)
    return who


async def accepted(request: Request, kind: str, secret: str) -> bool:
    """Whether ``secret`` (an API key, or a bearer token) authenticates, as the API would."""
    access = access_of(request)
    try:
        access.limit(await access.authenticate(_with_secret(credentials(request), kind, secret)))
    except GatewayError:
        return False
    return True


def host(request: Request) -> str:
    return client_host(request)


def signed_in(secret: str, kind: str, *, secure: bool, target: str) -> Response:
    response = RedirectResponse(target, status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        f"{'bearer' if kind == 'bearer' else 'key'}:{secret}",
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    return response


def signed_out() -> Response:
    response = RedirectResponse(url("/login"), status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: a console path only (no open redirect)."""
    if target and target.startswith(f"{PREFIX}/") and not target.startswith("//"):
        parts = urllib.parse.urlsplit(target)
        if not parts.scheme and not parts.netloc:
            return target
    return f"{PREFIX}/"


class Query:
    """A page's query parameters, checked: a bad one is 400 naming it."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.params = params

    def text(self, name: str, default: str = "", limit: int = 1024) -> str:
        value = self.params.get(name, default)
        if len(value) > limit:
            raise InvalidRequestError(f"{name} is longer than {limit} characters", name)
        return value

    def integer(
        self, name: str, default: int | None, low: int = 0, high: int = 2**63 - 1
    ) -> int | None:
        raw = self.params.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise InvalidRequestError(f"{name} {raw!r} is not a whole number", name) from None
        if not low <= value <= high:
            raise InvalidRequestError(f"{name} {value} is outside [{low}, {high}]", name)
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.params.get(name, "") or default
        if value not in choices:
            raise InvalidRequestError(
                f"{name} {value!r}: expected one of {', '.join(choices)}", name
            )
        return value
