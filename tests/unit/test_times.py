"""RFC 3339 times (kuberhealthy/base/times.py): every form the API server, v2 and a hand edit may write
parses to the same instant; what we write is UTC whole seconds (a Lease's MicroTime: microseconds)."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kuberhealthy.base.times import format_datetime, format_micro_time, format_time, parse_datetime, parse_time, utcnow

T0 = 1_796_119_200.0  # 2026-12-01T10:00:00Z
NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def test_times_are_rfc3339_utc_whole_seconds_and_parse_back() -> None:
    assert format_time(T0 + 0.9) == "2026-12-01T10:00:00Z"
    assert parse_time("2026-12-01T10:00:00Z") == T0
    assert parse_time("2026-12-01T11:00:00+01:00") == T0
    assert parse_time("2026-12-01T10:00:00.5Z") == T0 + 0.5


def test_rfc3339_times_with_and_without_fractions_parse() -> None:
    assert parse_time("2023-11-14T22:13:20Z") == NOW
    assert parse_time("2023-11-14T22:13:20.5Z") == NOW + 0.5
    assert parse_time("2023-11-14T23:13:20+01:00") == NOW
    assert parse_time("") is None and parse_time("yesterday") is None and parse_time(None) is None


@pytest.mark.parametrize("text", [
    "2026-12-01T10:00:00Z",  # metav1.Time, as the API server and v2 write it
    "2026-12-01T10:00:00z",  # a lower-case zone
    "2026-12-01t10:00:00Z",  # a lower-case separator
    "2026-12-01 10:00:00Z",  # a space instead of T
    "2026-12-01T10:00:00+00:00",
    "2026-12-01T10:00:00-00:00",
    "2026-12-01T11:30:00+01:30",
    "2026-12-01T05:00:00-05:00",
    "2026-12-01T11:00:00+0100",  # an offset without its colon
    "2026-12-01T10:00:00",  # no offset: UTC
    "2026-12-01T10:00Z",  # no seconds
    "2026-12-01T10Z",
    "20261201T100000Z",  # ISO 8601 basic form
])
def test_every_form_of_the_same_instant_parses_to_it(text: str) -> None:
    assert parse_time(text) == T0
    when = parse_datetime(text)
    assert when is not None and when.utcoffset() is not None and when.timestamp() == T0


@pytest.mark.parametrize(("text", "fraction"), [
    ("2026-12-01T10:00:00.5Z", 0.5),
    ("2026-12-01T10:00:00.25+00:00", 0.25),
    ("2026-12-01T10:00:00.123456Z", 0.123456),  # MicroTime, a Lease's renewTime
    ("2026-12-01T10:00:00.123456789Z", 0.123456),  # nanoseconds (a container log's timestamps): cut to micro
    ("2026-12-01T10:00:00,5Z", 0.5),  # ISO's decimal comma
])
def test_fractions_of_a_second_are_kept(text: str, fraction: float) -> None:
    assert parse_time(text) == pytest.approx(T0 + fraction, abs=1e-6)


def test_a_date_alone_is_its_midnight_in_utc() -> None:
    assert parse_time("2026-12-01") == T0 - 10 * 3600


@pytest.mark.parametrize("junk", [None, "", "yesterday", 12, 1.5, b"2026-12-01T10:00:00Z", [], "2026-13-01T00:00:00Z",
                                  "2026-12-01T24:00:00Z", "2026-02-30T10:00:00Z", " 2026-12-01T10:00:00Z",
                                  "2026-12-01T10:00:00Z ", "2026-12-01T10:00:00ZZ", "2026-12-01T10:00:00 UTC"])
def test_a_timestamp_that_is_not_one_parses_to_none(junk: Any) -> None:
    assert parse_time(junk) is None and parse_datetime(junk) is None


def test_formatting_cuts_the_fraction_and_converts_to_utc() -> None:
    assert format_time(T0) == format_time(T0 + 0.999) == "2026-12-01T10:00:00Z"
    assert format_time(0) == "1970-01-01T00:00:00Z"
    plus_one = dt.timezone(dt.timedelta(hours=1))
    assert format_datetime(dt.datetime(2026, 12, 1, 11, 0, 0, 999_999, tzinfo=plus_one)) == "2026-12-01T10:00:00Z"
    assert parse_time(format_time(T0 + 59.7)) == T0 + 59


def test_a_micro_time_keeps_six_digits_in_utc() -> None:
    when = dt.datetime(2026, 12, 1, 10, 0, 0, 5, tzinfo=dt.timezone.utc)
    assert format_micro_time(when) == "2026-12-01T10:00:00.000005Z"
    assert format_micro_time(when.replace(microsecond=0)) == "2026-12-01T10:00:00.000000Z"
    assert parse_time(format_micro_time(when)) == pytest.approx(T0 + 5e-6, abs=1e-7)


def test_now_is_aware_and_in_utc() -> None:
    now = utcnow()
    assert now.utcoffset() == dt.timedelta(0)
    assert parse_time(format_datetime(now)) == int(now.timestamp())
