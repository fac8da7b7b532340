"""The console's plumbing: templates, the signed-in person of a request, CSRF, errors as pages.

Every page handler is a plain ``def`` (FastAPI runs it in the thread pool, so database work never
blocks the event loop) that calls the same services the API's routes call and renders the API's
own response models through a Jinja2 template. Nothing here decides anything about money or GPUs.
"""

from __future__ import annotations

import logging
import shlex
import urllib.parse
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from danlu import __version__
from danlu.accounts.credentials import CONSOLE_COOKIE, WebSessionInfo, csrf_ok, signed_in
from danlu.accounts.service import detached_user, hash_token, user_columns
from danlu.compute.views import ReadCache
from danlu.context import Platform
from danlu.core.errors import DanluError, Forbidden, InvalidInput, NotFound
from danlu.db.models import User
from danlu.i18n.catalogs import LANGUAGES, Formatter, formatter, negotiate
from danlu.i18n.errors import localized
from danlu.i18n.sentences import translate

log = logging.getLogger(__name__)
COOKIE = CONSOLE_COOKIE
LANG_COOKIE = "danlu_lang"
ASSETS = "/console-assets"
SECURITY_HEADERS = {
    # No inline script or style anywhere, no third party, no framing.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
# The web terminal's page: xterm.js writes its own <style> element (its cell sizes and colours), so
# inline style is allowed there, and only there; scripts stay 'self' only.
TERMINAL_HEADERS = SECURITY_HEADERS | {
    "Content-Security-Policy": SECURITY_HEADERS["Content-Security-Policy"] + "; style-src 'self' 'unsafe-inline'"
}

templates = Environment(
    loader=PackageLoader("danlu.console", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    # The templates ship in the package and never change under a running server: with auto-reload Jinja
    # stat()s each template file on every lookup (issue 29 measured it at ~23 % of the instances page;
    # 7.9 µs → 0.7 µs per lookup here). A new version is a restart.
    auto_reload=False,
)
templates.filters["shell"] = shlex.join  # a command as one could type it again


class InternalError(DanluError):
    http_status = 500


class SignInNeeded(Exception):
    """Raised for a page that needs a signed-in person; answered with a redirect to /login."""

    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


class BadCsrf(Exception):
    """A form without this session's CSRF token: answered 403, nothing done."""


@dataclass
class Ctx:
    """What every page knows: the platform, the person (or None on /login), their session's CSRF
    token, the language and its formatter, the path (for the language switch and sign-in return)."""

    request: Request
    platform: Platform
    lang: str
    fmt: Formatter
    user: User | None = None
    session: WebSessionInfo | None = None
    flash: list[tuple[str, str]] = field(default_factory=list)

    @property
    def me(self) -> User:
        assert self.user is not None
        return self.user

    def _(self, message: str) -> str:
        return self.fmt.gettext(message)

    def said(self, sentence: str | None) -> str:
        """A sentence the platform stored in English (an event, a reason, a memo, an invoice line) in the
        page's language (danlu.i18n.sentences); as stored where no template knows it."""
        return translate(sentence or "", self.fmt.gettext)

    def error_text(self, e: DanluError) -> str:
        """``e``'s message in the console's language: its catalog translation where the console wrote it,
        as is where it is already in that language, else the code's sentence beside it (danlu.i18n.errors)."""
        translated = self._(e.message)
        if translated != e.message or any(ord(ch) >= 0x2E80 for ch in e.message):
            return translated
        return localized(e.code, e.message, self.lang)

    def render(
        self, template: str, status: int = 200, headers: dict[str, str] | None = None, **values: Any
    ) -> HTMLResponse:
        page = templates.get_template(template).render(
            ctx=self,
            _=self._,
            said=self.said,
            fmt=self.fmt,
            languages=LANGUAGES,
            version=__version__,
            assets=ASSETS,
            csrf=self.session.csrf if self.session else "",
            path=self.request.url.path,
            here=str(self.request.url.path) + (f"?{self.request.url.query}" if self.request.url.query else ""),
            **values,
        )
        return HTMLResponse(page, status_code=status, headers=headers or SECURITY_HEADERS)

    def fragment(self, template: str, **values: Any) -> Markup:
        """A part of a page that depends only on ``values`` and the language (no session, path or
        CSRF token: it may be kept and shown to another request of the same person and language)."""
        return Markup(templates.get_template(template).render(_=self._, said=self.said, fmt=self.fmt, **values))

    def error_page(self, e: DanluError) -> HTMLResponse:
        return self.render("error.html", status=e.http_status, error=e, error_text=self.error_text(e))


def _lang_of(request: Request) -> str:
    return negotiate(request.cookies.get(LANG_COOKIE), request.headers.get("accept-language"))


def _base(request: Request) -> Ctx:
    p: Platform = request.app.state.platform
    lang = _lang_of(request)
    return Ctx(request, p, lang, formatter(lang, p.settings.timezone), flash=_read_flash(request))


# The signed-in person of a cookie (by its digest): the user's columns and the session, from a cache
# that any write to users or web_sessions in this process clears at once (sign-out, a password
# change, suspension), living 1 s for another process's writes; each request gets its own detached
# User. An expired session is refused by the clock at each request. (Issue 29: this lookup was ~10 %
# of the instances page.)
SIGNED_IN: ReadCache[str, tuple[dict[str, Any], WebSessionInfo] | None] = ReadCache(
    ("web_sessions", "users"), ttl_s=1.0
)


def _cookie(request: Request) -> tuple[str, str] | None:
    """The session cookie and its digest (the cache's key), or None for none or one too long to be ours."""
    cookie = request.cookies.get(COOKIE)
    return (cookie, hash_token(cookie)) if cookie and len(cookie) <= 128 else None


def _signed_in(request: Request) -> Ctx:
    """The signed-in person of the request's cookie, read from the database where the cache has no
    answer (in the thread pool: :func:`page`)."""
    ctx = _base(request)
    cookie = _cookie(request)
    if cookie is None:
        return _with_person(ctx, None)
    p = ctx.platform

    def load() -> tuple[dict[str, Any], WebSessionInfo] | None:
        found = signed_in(p, cookie[0])
        return None if found is None else (user_columns(found[0]), found[1])

    return _with_person(ctx, SIGNED_IN.get(p.db.engine, cookie[1], load))


def _remembered(request: Request) -> Ctx | None:
    """:func:`_signed_in` where the cache holds the cookie's person, else None (reads nothing)."""
    cookie = _cookie(request)
    hit = SIGNED_IN.peek(request.app.state.platform.db.engine, cookie[1]) if cookie is not None else None
    return None if hit is None else _with_person(_base(request), hit)


def _with_person(ctx: Ctx, hit: tuple[dict[str, Any], WebSessionInfo] | None) -> Ctx:
    if hit is None or hit[1].expires_at_ms <= ctx.platform.clock.now_ms():
        raise SignInNeeded(ctx.request.url.path)
    ctx.user, ctx.session = detached_user(hit[0]), hit[1]
    return ctx


def anyone(request: Request) -> Ctx:
    return _base(request)


async def page(request: Request) -> Ctx:
    """A signed-in person's page: answered on the event loop from the cache, else read in the thread pool."""
    ctx = _remembered(request)
    if ctx is None:
        ctx = await run_in_threadpool(_signed_in, request)
    return ctx


async def form_post(request: Request) -> Ctx:
    """A signed-in person's form: the session must be live and the form must carry its CSRF token."""
    ctx = await run_in_threadpool(_signed_in, request)
    form = await request.form()
    token = form.get("csrf")
    if ctx.session is None or not csrf_ok(ctx.session.csrf, token if isinstance(token, str) else None):
        raise BadCsrf()
    return ctx


async def operator_page(ctx: Annotated[Ctx, Depends(page)]) -> Ctx:
    _admin_only(ctx)
    return ctx


async def operator_post(ctx: Annotated[Ctx, Depends(form_post)]) -> Ctx:
    _admin_only(ctx)
    return ctx


def _admin_only(ctx: Ctx) -> None:
    if not ctx.me.is_admin:
        # Not 403: a renter learns nothing about the operator's pages, as with another's objects.
        raise NotFound("page_not_found", "there is no such page")


Anyone = Annotated[Ctx, Depends(anyone)]
Page = Annotated[Ctx, Depends(page)]
Post = Annotated[Ctx, Depends(form_post)]
OperatorPage = Annotated[Ctx, Depends(operator_page)]
OperatorPost = Annotated[Ctx, Depends(operator_post)]


def back(to: str, **query: str) -> RedirectResponse:
    """After a form: see-other to a page (Post/Redirect/Get), with an optional notice for it."""
    q = urllib.parse.urlencode({k: v for k, v in query.items() if v})
    return RedirectResponse(f"{to}?{q}" if q else to, status_code=303, headers=SECURITY_HEADERS)


def safe_next(path: str | None) -> str:
    """Only a path on this site (not //evil.example or a full URL) is a place to return to."""
    if path and path.startswith("/") and not path.startswith("//") and "\\" not in path:
        return path
    return "/instances"


def sign_in_redirect(request: Request, exc: SignInNeeded) -> Response:
    return RedirectResponse(f"/login?next={urllib.parse.quote(exc.next_path)}", status_code=303)


FLASH_COOKIE = "danlu_flash"


def with_flash(response: Response, kind: str, message: str) -> Response:
    """A one-time notice for the next page (after a redirect): ``kind`` is ok or error."""
    response.set_cookie(
        FLASH_COOKIE, urllib.parse.quote(f"{kind}|{message[:500]}"), max_age=60, httponly=True, samesite="lax"
    )
    return response


def _read_flash(request: Request) -> list[tuple[str, str]]:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return []
    kind, _, message = urllib.parse.unquote(raw).partition("|")
    return [(kind if kind in ("ok", "error") else "error", message)]


class ConsoleRoute(APIRoute):
    """Every console route answers HTML, never the API's JSON errors:

    - not signed in → 303 to /login?next=PATH;
    - a form without the session's CSRF token → 403 page, nothing done;
    - a DanluError from a GET → its page with its status (another tenant's object: 404);
    - a DanluError from a form → 303 back to the page the form was on, with the message shown there
      (nothing was changed: the services raise before they write);
    - a flash notice set by the previous form is shown once, then cleared.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response = await handler(request)
            except SignInNeeded as e:
                return sign_in_redirect(request, e)
            except BadCsrf:
                ctx = _base(request)
                return ctx.error_page(
                    Forbidden(
                        "bad_csrf",
                        ctx._("This form has expired or did not come from this site. Reload the page and try again."),
                    )
                )
            except RequestValidationError as e:
                # A field FastAPI refused before the handler ran (missing, too long): a page, not a 500.
                first = e.errors()[0] if e.errors() else {}
                where = ".".join(str(x) for x in first.get("loc", ()) if x not in ("body", "query", "path"))
                bad = InvalidInput("invalid_request", f"{where or 'request'}: {first.get('msg', 'invalid')}")
                if request.method == "POST":
                    return with_flash(back(_referrer_path(request)), "error", _base(request).error_text(bad))
                return _base(request).error_page(bad)
            except DanluError as e:
                if request.method == "POST":
                    return with_flash(back(_referrer_path(request)), "error", _base(request).error_text(e))
                return _base(request).error_page(e)
            except Exception:
                log.exception("console: unhandled error on %s %s", request.method, request.url.path)
                return _base(request).error_page(
                    InternalError(
                        "internal_error", "the server hit an unexpected error; it was logged, please report it"
                    )
                )
            if request.method == "GET" and FLASH_COOKIE in request.cookies:
                response.delete_cookie(FLASH_COOKIE)
            return response

        return route


def _referrer_path(request: Request) -> str:
    """The page a failed form came from (browsers send a same-origin Referer: Referrer-Policy is
    same-origin); without one, the instances page. Never another site."""
    ref = urllib.parse.urlsplit(request.headers.get("referer", ""))
    if not ref.path or (ref.netloc and ref.netloc != request.url.netloc):
        return "/instances"
    return safe_next(ref.path)


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], **data: Any) -> M:
    """A form's fields through the API's own request model: the same limits and error codes."""
    try:
        return model(**data)
    except ValidationError as e:
        errors = e.errors()
        own = next((x for x in errors if (x.get("ctx") or {}).get("danlu_code")), None)
        if own is not None:
            raise InvalidInput(str(own["ctx"]["danlu_code"]), str(own["msg"])) from None
        parts = [f"{'.'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg', 'invalid')}" for err in errors[:3]]
        raise InvalidInput("invalid_request", "; ".join(parts)) from None
