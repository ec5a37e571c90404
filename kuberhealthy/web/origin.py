"""Refusing cross-site browser requests to the routes that change state, in the shape of Go 1.25's
net/http CrossOriginProtection (docs/interface.md#run-now).

A web page open in a browser that can reach the daemon (a port-forward, an ingress) can send a POST
to it; without this, any page could keep every check running back to back. The rules, as Go's:
  * GET, HEAD and OPTIONS always pass (they change nothing);
  * `Sec-Fetch-Site` present (every browser since 2023): only `same-origin` and `none` (typed in the
    address bar, a bookmark) pass;
  * else an `Origin` must name the request's `Host` (the host and port are compared, not the scheme:
    Host carries none); `Origin: null` (sandboxed frames, file: pages, some redirects) never does;
  * neither header: not a browser (curl, scripts, kubectl port-forward users) or a same-origin request
    of an old one: it passes;
  * an origin listed in config `trustedOrigins` passes either way (it is cross-origin by definition,
    so a modern browser says `Sec-Fetch-Site: cross-site` for it).
Besides Go's rules, a body typed `text/plain`, `application/x-www-form-urlencoded` or
`multipart/form-data` is refused: those are the types an HTML form, or a fetch with no CORS
preflight, can send from any page; the dashboard's button sends no body at all.

Which routes: every state-changing one a browser could be made to send, today only
`POST /api/checks/<ns>/<name>/run` (web/api.py registers the check for its blueprint). Not
`POST /externalCheckStatus`: checker pods call it with no browser headers, and a cross-site page
cannot make a report count (it is identified by a run's uuid header, which a page cannot send
cross-site without a CORS preflight that is never granted, by a token, or by the pod's own address).
Not `/` for POST and the like: it answers the status page, or 400 for a body, and changes nothing.

What it does not do: authenticate anyone. Whoever can reach the port without a browser can still
request runs (turn the route off with `enableRunAPI: false`; the chart's NetworkPolicy limits who
reaches the port at all).
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from urllib.parse import urlsplit

from flask import Response, request

from kuberhealthy.web.answers import plain

logger = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PASSING_SITES = ("same-origin", "none")
FORM_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")


def _origin_host(origin: str) -> str:
    """The host[:port] an Origin names, lower-cased; "" when it names none (`null`, garbage)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return ""
    if not parts.scheme or not parts.netloc:
        return ""
    return parts.netloc.rpartition("@")[2].lower()


def cross_origin(method: str, headers: Mapping[str, str], trusted: Collection[str]) -> str | None:
    """Why a request with these headers is refused as cross-origin; None when it passes."""
    if method.upper() in SAFE_METHODS:
        return None
    site = headers.get("Sec-Fetch-Site", "").strip().lower()
    origin = headers.get("Origin", "").strip()
    if origin and origin.lower() in trusted:
        return None
    if site:
        if site in PASSING_SITES:
            return None
        return (f"cross-site request refused (Sec-Fetch-Site: {site}): only this server's own pages "
                "and the origins in trustedOrigins may ask")
    if not origin:
        return None
    host = headers.get("Host", "").strip().lower()
    if host and _origin_host(origin) == host:
        return None
    return (f"cross-origin request refused: Origin {origin} is not this server ({host or 'no Host'}) "
            "and not in trustedOrigins")


def form_body(content_type: str) -> str | None:
    """Why a body of this Content-Type is refused (one a form or an unpreflighted fetch can send)."""
    mimetype = content_type.partition(";")[0].strip().lower()
    if mimetype in FORM_TYPES:
        return f"a body typed {mimetype} is refused here: send no body (or JSON)"
    return None


def refusal(trusted: Collection[str], *, form_bodies: bool = True) -> Response | None:
    """The 403 for the current request when it is cross-origin (or, with form_bodies, carries a
    form-typed body); None when it may go on. Meant as a blueprint's before_request."""
    seen = {name: request.headers.get(name, "") for name in ("Sec-Fetch-Site", "Origin", "Host")}
    reason = cross_origin(request.method, seen, trusted)
    if reason is None and form_bodies and request.method not in SAFE_METHODS:
        reason = form_body(request.headers.get("Content-Type", ""))
    if reason is None:
        return None
    logger.debug("%s %s from %s refused (403): %s", request.method, request.path, request.remote_addr, reason)
    return plain(403, reason)
