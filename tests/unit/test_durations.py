"""Go-compatible duration parsing and formatting."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuberhealthy.base.durations import format_duration, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("1m30s", 90), ("1h", 3600), ("500ms", 0.5), ("1.5h", 5400), ("0", 0), ("2h45m", 9900),
    ("10us", 1e-5), ("3µs", 3e-6), ("7ns", 7e-9), ("-1m", -60), (".5s", 0.5),
])
def test_go_duration_strings_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "1x", "m", "1m 30s", "abc", "1.2.3s", "5 minutes"])
def test_strings_go_rejects_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1.234567, "1.234567s"), (90, "1m30s"), (3600, "1h0m0s"), (0.5, "500ms"), (123.5, "2m3.5s"),
    (1e-6, "1µs"), (1.5e-3, "1.5ms"), (7e-9, "7ns"), (3661.001, "1h1m1.001s"), (-2, "-2s"),
])
def test_seconds_format_as_go_duration_string(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**14))
def test_formatting_then_parsing_gives_back_the_same_nanoseconds(ns: int) -> None:
    assert round(parse_duration(format_duration(ns / 1e9)) * 1e9) == ns
