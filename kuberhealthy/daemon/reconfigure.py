"""Live reload: which config changes apply to running services, and applying them in place.

A changed key applies live where it can: only the parts it feeds are replaced (the checks, the
Influx forwarder, the reapers, the elector) and the Lease is kept; what is read at each use
(LIVE_KEYS) needs nothing replaced. A new targetNamespace (or pod identity) means other caches, and a
new metricsStyle another /metrics: needs_rebuild tells the caller to stop and rebuild the services
(and the web app with them). The listeners (listenAddress, listenAddressTLS and the TLS files) and
leaderElection.* apply only after a restart: needs_restart keeps them at their running values.
Reading the file is configwatch.py's; deciding and sequencing is runtime.py's.
"""
from __future__ import annotations

import dataclasses

from kuberhealthy.base.config import Config
from kuberhealthy.daemon.services import Services, make_elector
from kuberhealthy.outputs.influx import InfluxForwarder

INFLUX_KEYS = ("enable_influx", "influx_url", "influx_username", "influx_password", "influx_db")
REAPER_KEYS = ("max_khjob_age", "max_check_pod_age", "max_completed_pod_count", "max_error_pod_count",
               "state_reaper_interval", "check_reaper_run_interval")
RESTART_KEYS = {"listen_host": "listenAddress", "listen_port": "listenAddress",
                "leader_election": "leaderElection", "listen_tls_host": "listenAddressTLS",
                "listen_tls_port": "listenAddressTLS", "tls_cert_file": "tlsCertFile",
                "tls_key_file": "tlsKeyFile"}  # applied only by a restart of the process
REBUILD_KEYS = ("target_namespace", "pod_name", "pod_namespace",  # the caches themselves change
                "metrics_style")  # the web app's registry is built for one style
# What every checker pod carries, or every run's schedule is made from: the checks restart.
CHECK_KEYS = ("external_check_reporting_url", "v3_reporting_url", "healthcheck_run_interval",
              "healthcheck_timeout")
ELECTOR_KEYS = ("enable_force_master",)
# Read through services.config at each use (a request, a scrape, a run's end): nothing to replace.
LIVE_KEYS = ("log_level", "check_change_debounce", "prom_metrics", "report_source_check", "report_auth",
             "report_rate_limit", "report_rate_burst", "history_length", "capture_logs", "expose_logs",
             "enable_run_api", "dashboard_at_root", "trusted_origins", "sidecar_containers",
             "status_page")


def _changed(old: Config, new: Config, keys: tuple[str, ...]) -> bool:
    return any(getattr(old, k) != getattr(new, k) for k in keys)


def needs_restart(old: Config, new: Config) -> tuple[Config, list[str]]:
    """`new` with the settings that only a restart applies kept at their running values, and their names."""
    names = sorted({name for attr, name in RESTART_KEYS.items() if getattr(old, attr) != getattr(new, attr)})
    kept = dataclasses.replace(new, **{attr: getattr(old, attr) for attr in RESTART_KEYS})
    return kept, names


def needs_rebuild(old: Config, new: Config) -> bool:
    """Whether the services must be rebuilt (stopped and started again, the web app built anew) to apply `new`."""
    return _changed(old, new, REBUILD_KEYS)


def reconfigure(services: Services, new: Config) -> list[str]:
    """Apply a changed config to running services, in place; returns what was restarted.

    The Lease is kept. Only the parts a changed key feeds are replaced: the checks (the reporting URLs
    every checker pod carries, the HealthCheck defaults every schedule is made from), the Influx
    forwarder, the reapers, the elector (enableForceMaster).
    Callers handle needs_restart/needs_rebuild first.
    """
    old = services.config
    services.config = new
    restarted: list[str] = []
    if _changed(old, new, INFLUX_KEYS):
        old_influx = services.influx
        services.influx = InfluxForwarder(new) if new.enable_influx else None
        if old_influx is not None:
            services.replace_part(old_influx, services.influx)
            services.influx_dropped_before += old_influx.dropped_points()  # joined: its count is final
        elif services.influx is not None:
            services.insert_part(services.influx)
        restarted.append("influx")
    if _changed(old, new, CHECK_KEYS) and services.controller is not None:
        services.controller.restart_checks()  # running pods carry the old value: replace them
        restarted.append("checks")
    if _changed(old, new, REAPER_KEYS) and services.controller is not None:
        services.controller.restart_leader_parts()
        restarted.append("reapers")
    if _changed(old, new, ELECTOR_KEYS) and services.controller is not None \
            and services.elector is not None:
        old_elector = services.elector
        services.elector = make_elector(services.controller, services, new)
        services.replace_part(old_elector, services.elector)  # the old one stops its checks, releases the Lease
        restarted.append("elector")
    return restarted
