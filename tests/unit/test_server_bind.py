"""listenAddress → gunicorn bind, with Go's meaning of `:port`; the gunicorn settings the image needs."""
from kuberhealthy.base.config import from_mapping
from kuberhealthy.daemon.httpworker import PollingWorker
from kuberhealthy.daemon.server import HTTP_THREADS, KEEPALIVE, KuberhealthyApplication, _bind, http_settings

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
