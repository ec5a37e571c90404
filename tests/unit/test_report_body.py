"""Report bodies decoded like Go's encoding/json into v2's status.Report, then v2's (and our) rules."""
from __future__ import annotations

import pytest

from kuberhealthy.web.addresses import normalize_ip
from kuberhealthy.web.report.body import BLANK_ERROR, NO_ERRORS, OK_WITH_ERRORS, BadReport, decode, parse_report


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"OK": true, "Errors": []}', (True, [])),
    (b'{"ok": false, "errors": ["a"]}', (False, ["a"])),
    (b'{"Ok": true, "OK": false, "oK": true}', (True, None)),  # the last duplicate wins
    (b'{"o\\u212a": true}', (True, None)),  # Go folds the Kelvin sign to k
    (b'{"Errors": ["a"], "errors": null}', (False, None)),
    (b'{"OK": null, "Errors": ["x", null]}', (False, ["x", ""])),
    (b'{"unknown": {"deep": [1, 2, {"x": null}]}, "OK": true}', (True, None)),
    (b"null", (False, None)),
    (b'  {"OK": true}  \n', (True, None)),
    (b'{"OK": false, "Errors": ["\\ud800 lone"]}', (False, ["\ufffd lone"])),
])
def test_bodies_decode_as_gos_decoder_would(body: bytes, expected: tuple[bool, list[str] | None]) -> None:
    assert decode(body) == expected


@pytest.mark.parametrize("body", [
    b"", b"{", b"nope", b"[]", b'"OK"', b"1", b'{"OK": "true"}', b'{"OK": 1}', b'{"Errors": "e"}',
    b'{"Errors": [1]}', b'{"Errors": {"a": 1}}', b"NaN", b'{"OK": Infinity}', b'{"OK": true} {}',
    b"[" * 100_000, b"\xef\xbb\xbf{}",
])
def test_malformed_bodies_are_refused_as_unmarshal_errors(body: bytes) -> None:
    with pytest.raises(BadReport) as e:
        decode(body)
    assert str(e.value).startswith("Failed to unmarshal state json")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("body", "reason"), [
    (b'{"OK": false}', NO_ERRORS),
    (b'{"OK": false, "Errors": null}', NO_ERRORS),
    (b'{"Errors": []}', NO_ERRORS),
    (b'{"OK": false, "Errors": ["a", ""]}', BLANK_ERROR),
    (b'{"OK": false, "Errors": [" \\u3000\\t"]}', BLANK_ERROR),
    (b'{"OK": false, "Errors": [null]}', BLANK_ERROR),
    (b'{"OK": true, "Errors": ["a"]}', OK_WITH_ERRORS),
    (b'{"OK": true, "Errors": [""]}', OK_WITH_ERRORS),
])
def test_reports_breaking_the_rules_are_refused_with_v2s_reasons(body: bytes, reason: str) -> None:
    with pytest.raises(BadReport) as e:
        parse_report(body)
    assert str(e.value) == reason


def test_acceptable_reports() -> None:
    assert parse_report(b'{"OK": true}').errors == ()
    assert parse_report(b'{"OK": true, "Errors": null}').ok is True
    r = parse_report(b'{"OK": false, "Errors": ["a", "b <c>"]}')
    assert (r.ok, r.errors) == (False, ("a", "b <c>"))


@pytest.mark.parametrize(("remote", "ip"), [
    ("127.0.1.5", "127.0.1.5"),
    ("::1", "::1"),
    ("[::1]", "::1"),
    ("fe80::1%eth0", "fe80::1"),
    ("[fe80::1%25eth0]", "fe80::1"),
    ("::ffff:10.0.0.7", "10.0.0.7"),
    ("2001:DB8:0:0::1", "2001:db8::1"),
    ("nonsense", None),
    ("", None),
])
def test_remote_addresses_are_normalised_like_pod_ips(remote: str, ip: str | None) -> None:
    assert normalize_ip(remote) == ip
