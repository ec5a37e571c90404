"""`GET /` (the v2 status page) and `GET /metrics` (the v2 Prometheus families).

Both are served from the khstate cache: the page bytes are prepared by state.StatusCache when the cache
changes, so a request costs a lookup, not a render (a `?namespace=` filter renders from the prepared
per-check fragments). As in v2, `/` answers 200 even when checks fail, and refuses a request that
carries a body: that is a checker reporting to the wrong URL. With `dashboardAtRoot` on, `/` also
serves the dashboard (the overview create_app hands in as HtmlRoot) to a GET whose Accept ranks
text/html above application/json, and says `Vary: Accept`; every other request, and `?format=json`,
still gets the JSON.

`/` is what monitors poll, so its usual request (no body, no query string) is told from the WSGI
environ without parsing headers or query, and looks up only the parts it uses.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from flask import Blueprint, Response, request
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry
from werkzeug.datastructures import MIMEAccept

from kuberhealthy.web.answers import plain, requested_namespaces
from kuberhealthy.web.context import context
from kuberhealthy.web.parts import part
from kuberhealthy.web.status.exposition import encode, format_of
from kuberhealthy.web.status.page import StatusCache

logger = logging.getLogger(__name__)

bp = Blueprint("status", __name__)

# v2 served the page for any method; a POST with a body (a misdirected report) gets a 400 there.
STATUS_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
WRONG_URL = "Unexpected body from status page request. Verify check is reporting to the right status url"


@dataclass(frozen=True)
class HtmlRoot:
    """What `/` serves a browser with dashboardAtRoot on: create_app hands in the dashboard's overview,
    so this room does not import the dashboard's."""

    prefers_html: Callable[[MIMEAccept], bool]
    page: Callable[[], Response]


def request_has_body() -> bool:
    environ = request.environ
    if environ.get("CONTENT_LENGTH", "") in ("", "0") and "HTTP_TRANSFER_ENCODING" not in environ:
        return False  # the usual GET, told without parsing the headers
    length = request.content_length
    if length:
        return True
    if length is None and "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        return bool(request.stream.read(1))
    return False


@bp.route("/", methods=STATUS_METHODS)
def status_page() -> Response:
    if request_has_body():
        logger.warning("Unexpected body on a status page request from %s to %s; is a check reporting to the "
                       "wrong URL?", request.remote_addr, request.full_path)
        return plain(400, WRONG_URL)
    services = context().services
    negotiate = services.config.dashboard_at_root  # off by default: `/` is the v2 JSON for everyone
    query = bool(request.environ.get("QUERY_STRING"))  # parsed only when there is one
    if (negotiate and request.method in ("GET", "HEAD") and not (query and request.args.get("format") == "json")
            and (root := part(HtmlRoot)).prefers_html(request.accept_mimetypes)):
        resp = root.page()
    else:
        raw = request.args.get("namespace", "") if query else ""
        namespaces = requested_namespaces(raw) if raw else None
        page = part(StatusCache).page(services.current_master(), namespaces)
        resp = Response(page, content_type="application/json")
    if negotiate:
        resp.vary.add("Accept")
    return resp


@bp.route("/metrics", methods=["GET", "HEAD"])
def metrics() -> Response:
    accept = request.headers.get("Accept", "")
    try:
        encoder, content_type = choose_encoder(accept)
    except (TypeError, ValueError):  # prometheus-client 0.26 compares an unparsed `version=x` to a tuple
        return plain(400, f"malformed Accept header {accept[:80]!r}")
    return Response(encode(part(CollectorRegistry), format_of(encoder)), content_type=content_type)
