"""listenAddress (and listenAddressTLS) → gunicorn bind, with Go's meaning of `:port`; the gunicorn settings
the image needs; the HTTPS listener's worker class; the web benchmark serves the app as the daemon does."""
from pathlib import Path

import pytest

from bench.web_bench import ours_factory
from kuberhealthy.base.config import from_mapping
from kuberhealthy.base.errors import ConfigError
from kuberhealthy.daemon.httptls import ServerTLS
from kuberhealthy.daemon.httpworker import PollingWorker
from kuberhealthy.daemon.server import (
    HTTP_THREADS,
    KEEPALIVE,
    KuberhealthyApplication,
    _bind,
    _tls_bind,
    http_settings,
    server_tls,
)

ENV = {"POD_NAME": "kh-0"}


def test_a_bare_port_listens_on_every_address_ipv6_included_where_available() -> None:
    c = from_mapping({"listenAddress": ":8080"}, ENV)
    assert _bind(c, dual_stack=True) == "[::]:8080"
    assert _bind(c, dual_stack=False) == "0.0.0.0:8080"


def test_an_explicit_host_is_used_as_given() -> None:
    assert _bind(from_mapping({"listenAddress": "127.0.0.1:9090"}, ENV)) == "127.0.0.1:9090"
    assert _bind(from_mapping({"listenAddress": "[::1]:9090"}, ENV)) == "[::1]:9090"


def test_the_gunicorn_application_opens_no_control_socket_under_a_read_only_home() -> None:
    app = KuberhealthyApplication(from_mapping({"listenAddress": "127.0.0.1:9090"}, ENV), None, None)
    if "control_socket_disable" in app.cfg.settings:  # gunicorn >= 25.1 has one, on by default
        assert app.cfg.control_socket_disable is True
    assert app.cfg.bind == ["127.0.0.1:9090"]


def test_the_daemon_serves_with_its_own_worker_and_the_settings_the_web_benchmark_uses() -> None:
    app = KuberhealthyApplication(from_mapping({"listenAddress": "127.0.0.1:9090"}, ENV), None, None)
    settings = http_settings(app.cfg.settings)
    assert settings["worker_class"] is PollingWorker
    assert (settings["threads"], settings["keepalive"]) == (HTTP_THREADS, KEEPALIVE)
    for key, value in settings.items():
        assert getattr(app.cfg, key) == value, key


def test_with_tls_the_https_listener_is_bound_beside_http_as_listenaddress_is_read() -> None:
    c = from_mapping({"listenAddress": ":8080", "tlsCertFile": "/tls/tls.crt", "tlsKeyFile": "/tls/tls.key"}, ENV)
    assert (c.listen_tls_host, c.listen_tls_port) == ("", 8443)
    assert _tls_bind(c, dual_stack=True) == "[::]:8443"
    assert _tls_bind(c, dual_stack=False) == "0.0.0.0:8443"
    c = from_mapping({"listenAddress": ":8080", "listenAddressTLS": "127.0.0.1:9443"}, ENV)
    assert _tls_bind(c) == "127.0.0.1:9443"


def test_without_tls_no_https_listener_is_opened_and_the_worker_is_the_plain_one() -> None:
    c = from_mapping({"listenAddress": "127.0.0.1:9090"}, ENV)
    assert server_tls(c) is None
    app = KuberhealthyApplication(c, None, None)
    assert app.cfg.bind == ["127.0.0.1:9090"] and app.cfg.worker_class is PollingWorker
    assert not app.cfg.is_ssl  # gunicorn's own TLS, which would wrap every listener, stays off


def test_a_certificate_file_that_cannot_be_read_stops_start_up_naming_its_setting(tmp_path: Path) -> None:
    c = from_mapping({"tlsCertFile": str(tmp_path / "none.crt"), "tlsKeyFile": str(tmp_path / "none.key")}, ENV)
    with pytest.raises(ConfigError, match=r"tlsCertFile \(KH_TLS_CERT_FILE\)"):
        KuberhealthyApplication(c, None, None)


def test_https_on_port_0_is_refused_the_worker_tells_its_listener_by_port() -> None:
    c = from_mapping({"tlsCertFile": "/a", "tlsKeyFile": "/b", "listenAddressTLS": "127.0.0.1:0"}, ENV)
    with pytest.raises(ConfigError, match="listenAddressTLS"):
        server_tls(c)


def test_the_tls_worker_class_is_ours_knowing_the_https_port() -> None:
    tls = object.__new__(ServerTLS)  # no files: only the class is under test
    tls.port = 8443
    worker_class = http_settings([], tls)["worker_class"]
    assert issubclass(worker_class, PollingWorker) and worker_class.tls is tls
    assert PollingWorker.tls is None and http_settings([])["worker_class"] is PollingWorker


def test_the_web_benchmark_builds_the_apps_it_serves_and_they_answer() -> None:
    page = ours_factory(30)().test_client().get("/")
    assert page.status_code == 200 and page.get_json()["CheckDetails"]["team-00/check-0000"]["OK"] is False
    api = ours_factory(5, history=3)().test_client().get("/api/checks")
    assert api.status_code == 200 and len(api.get_json()["checks"]) == 5
