"""listenAddress → gunicorn bind, with Go's meaning of `:port`."""
from kuberhealthy.base.config import from_mapping
from kuberhealthy.daemon.server import _bind

ENV = {"POD_NAME": "kh-0"}


def test_a_bare_port_listens_on_every_address_ipv6_included_where_available() -> None:
    c = from_mapping({"listenAddress": ":8080"}, ENV)
    assert _bind(c, dual_stack=True) == "[::]:8080"
    assert _bind(c, dual_stack=False) == "0.0.0.0:8080"


def test_an_explicit_host_is_used_as_given() -> None:
    assert _bind(from_mapping({"listenAddress": "127.0.0.1:9090"}, ENV)) == "127.0.0.1:9090"
    assert _bind(from_mapping({"listenAddress": "[::1]:9090"}, ENV)) == "[::1]:9090"
