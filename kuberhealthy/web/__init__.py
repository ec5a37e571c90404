"""The HTTP API every replica serves: the v2 status page, Prometheus metrics, check reports, probes,
the JSON API (web/api.py) and v3's routes (web/v3/).

`create_app(services)` builds a Flask app over the daemon's caches; the gunicorn wiring lives in
daemon/server.py. Handlers read the caches (khchecks, khstates, khjobs, HealthChecks, checker pods) and write only
through khstate.record_report and the run-now annotation (runnow.py); nothing here schedules checks,
talks to the Lease or lists pods from the API.
"""
from __future__ import annotations

from collections.abc import Sequence

from flask import Flask, Response
from prometheus_client.registry import Collector
from werkzeug.exceptions import HTTPException

from kuberhealthy.needs import WebNeeds
from kuberhealthy.records.checkspec import KIND_HEALTHCHECK
from kuberhealthy.web import api, health, openapi
from kuberhealthy.web.answers import plain
from kuberhealthy.web.checkkinds import check_kinds
from kuberhealthy.web.context import WebContext
from kuberhealthy.web.dashboard import render as dashpage
from kuberhealthy.web.dashboard import routes as dashboard_routes
from kuberhealthy.web.entries import HealthCheckCaches, ViewCache
from kuberhealthy.web.parts import install
from kuberhealthy.web.ratelimit import ConfiguredLimiter
from kuberhealthy.web.report import routes as report_routes
from kuberhealthy.web.report.admission import CALLER_WAIT, Admission
from kuberhealthy.web.report.stats import ReportStats
from kuberhealthy.web.report.tokens import Screen, TokenVerifier
from kuberhealthy.web.report.triage import Triage
from kuberhealthy.web.status import routes as status_routes
from kuberhealthy.web.status.metrics import CheckStatsCollector, InfluxCollector, make_registry
from kuberhealthy.web.status.page import StatusCache
from kuberhealthy.web.statuspage import routes as statuspage_routes
from kuberhealthy.web.uptime import Uptime
from kuberhealthy.web.v3 import logs as v3_logs
from kuberhealthy.web.v3 import routes as v3_routes
from kuberhealthy.web.v3 import summary as v3_summary


def _http_error(e: HTTPException) -> Response:
    """404/405/... as one line of plain text instead of Flask's HTML page."""
    return plain(e.code or 500, f"{e.name}: {e.description}" if e.description else e.name)


def create_app(services: WebNeeds, *, caller_wait: float = CALLER_WAIT,
               server_collectors: Sequence[Collector] = ()) -> Flask:
    """The Flask app over running (or about to run) services. `server_collectors` are the HTTP
    server's own metrics (the daemon's worker: connections it closed), exported on /metrics too.
    Every part a handler uses is built here and installed on the app (parts.py): the rooms (report/,
    status/, dashboard/, v3/, api.py, health.py) never import each other nor this module."""
    app = Flask(__name__, static_folder=None)  # the dashboard serves its own assets (web/dashboard/)
    v3 = services.kinds.named(KIND_HEALTHCHECK)
    cache = StatusCache(services.khstates, services.khjobs, services.khchecks,
                        healthchecks=v3.checks if v3 else None, hc_states=v3.states if v3 else None).attach()
    hc = HealthCheckCaches(v3.checks, v3.states, lambda: (services.config.healthcheck_run_interval,
                                                          services.config.healthcheck_timeout)) if v3 else None
    uptime = Uptime(services.khstates, v3.states if v3 else None, memo=services.rollups.memo)
    views = ViewCache(services.khchecks, services.khjobs, services.khstates, services.pods,
                      expose_logs=lambda: services.config.expose_logs, healthchecks=hc, uptime=uptime).attach()
    report_stats = ReportStats()
    ours = [CheckStatsCollector(views.entries, lambda: services.config),
            InfluxCollector(services.influx_points_dropped)]
    registry = make_registry(cache.summary, services.current_master, lambda: services.config,
                             services.cache_status, [*services.stats.collectors(), *report_stats.collectors(), *ours,
                                                     *server_collectors], rows=views.entries, leader=services.is_leader)
    triage = Triage(services.pods, services.kinds, services.notifier, services.read_checker_pods)
    tokens = TokenVerifier(services.resources, screen=Screen(services.pods, triage.may_be_new))
    limiter = ConfiguredLimiter(lambda: (services.config.report_rate_limit, services.config.report_rate_burst))
    admission = Admission(services, report_stats, tokens=tokens, triage=triage, caller_wait=caller_wait)
    kinds = check_kinds(services)
    install(app, WebContext(services, limiter), cache, views, registry, kinds, uptime,
            v3_summary.Summary(views, kinds, services.current_master), v3_logs.StreamSlots(),
            status_routes.HtmlRoot(dashpage.prefers_html, dashpage.overview),
            report_routes.ReportDesk(services, report_stats, limiter, admission))
    app.register_blueprint(status_routes.bp)
    app.register_blueprint(report_routes.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(v3_routes.bp)
    dashpage.init_app(app)
    app.register_blueprint(dashboard_routes.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(statuspage_routes.bp)
    app.register_error_handler(HTTPException, _http_error)
    return app


__all__ = ["CALLER_WAIT", "create_app"]
