"""The headers every HTML page of the daemon sends: the dashboard's pages and the status page.

Part of web/'s ground: pages show text that checks and their authors wrote (names, labels, error texts),
so the policy allows no script, style, image or connection but the daemon's own origin, and no framing;
with `nosniff` and no referrer, a page leaks nothing to another origin. Charts are inline SVG, which
this policy allows (presentation attributes are not styles).
"""
from __future__ import annotations

from flask import Response

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def secure(resp: Response) -> Response:
    """`resp` with the headers of an HTML page of ours."""
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp
