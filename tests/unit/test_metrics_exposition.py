"""/metrics keeps each check's rendered samples between scrapes (web/status/exposition.py): what it serves is
byte for byte what prometheus-client's encoders write for the same checks, scraped afresh, in every format
and escaping choose_encoder() picks, however the checks changed in between; and a scrape of unchanged
checks renders none of their samples again, and the new samples of a scrape are rendered one call per family."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from kuberhealthy.base.config import Config
from kuberhealthy.web.status import exposition
from kuberhealthy.web.status.exposition import Format, encode, format_of
from kuberhealthy.web.status.metrics import CheckStatsCollector, make_registry
from kuberhealthy.web.status.page import Details, StatusSummary
from tests.unit.metrics_support import NOW, Row, khstate, metrics_config, row, summary_of

ACCEPTS = ("", "text/plain; version=0.0.4", "text/plain; version=1.0.0; escaping=allow-utf-8",
           "text/plain; version=1.0.0; escaping=dots", "application/openmetrics-text",
           "application/openmetrics-text; version=1.0.0; escaping=values",
           "application/openmetrics-text; version=1.0.0; escaping=dots")
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['a"b', "back\\slash", "two\nlines", "ünï", ""])
WINDOWS = st.dictionaries(st.sampled_from(["1h", "24h", "7d", "30d"]),
                          st.fixed_dictionaries({"uptime": st.none() | st.floats(0, 1)}), max_size=4)


@st.composite
def checks(draw: st.DrawFn) -> tuple[list[Row], list[Details]]:
    """Rows of the JSON API's cache and the status summary's Details of the same few checks."""
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), unique=True, max_size=5))
    rows, details = [], []
    for name in names:
        ns = draw(st.sampled_from(["ns", "other"]))
        labels = draw(st.dictionaries(st.sampled_from(["kuberhealthy.io/severity", "kuberhealthy.io/team"]), TEXT,
                                      max_size=2))
        rows.append(row(name, ns, kind=draw(st.sampled_from(["check", "check", "job"])), labels=labels,
                        consecutiveFailures=draw(st.integers(0, 5)), successCount=draw(st.integers(0, 10**6)),
                        failureCount=draw(st.integers(0, 9)), paused=draw(st.none() | st.just({"until": "x"})),
                        lastOK=draw(st.none() | st.just("2024-05-01T11:59:00Z")), windows=draw(WINDOWS),
                        interval=draw(st.sampled_from([60.0, 600.0, 1e7]))))
        details.append(khstate(ns, name, job=draw(st.booleans()), OK=draw(st.booleans()),
                               Errors=draw(st.lists(TEXT, max_size=2)), RunDuration=draw(st.sampled_from(
                                   ["", "1.5s", "2m0s", "bad"]))))
    return rows, details


class Scene:
    """One registry kept across scrapes (as the app keeps it) over checks that change between them."""

    def __init__(self, config: Config) -> None:
        self.rows: list[Row] = []
        self.summary: StatusSummary = summary_of()
        self.config = config
        self.registry = registry_of(lambda: self.summary, lambda: self.rows, lambda: self.config)


def registry_of(summary: Callable[[], StatusSummary], rows: Callable[[], Sequence[Any]],
                config: Callable[[], Config]) -> CollectorRegistry:
    return make_registry(summary, lambda: "kh-0", config, extra=[CheckStatsCollector(rows, config, wall=lambda: NOW)],
                         rows=rows, leader=lambda: True)


def afresh(scene: Scene, accept: str) -> bytes:
    """What prometheus-client's encoder writes for the scene's checks with nothing kept from a scrape before."""
    rows, summary, config = list(scene.rows), scene.summary, scene.config
    return choose_encoder(accept)[0](registry_of(lambda: summary, lambda: rows, lambda: config))


@given(st.lists(st.tuples(checks(), st.sampled_from(["v2", "v3"]), st.booleans(), st.sampled_from([0, 4]),
                          st.sampled_from([(), ("severity", "team")])), min_size=1, max_size=4),
       st.lists(st.sampled_from(ACCEPTS), min_size=1, max_size=3))
def test_every_scrape_is_what_prometheus_client_writes_afresh_however_the_checks_changed(
        scrapes: list[Any], accepts: list[str]) -> None:
    scene = Scene(metrics_config())
    for (rows, details), style, suppress, cut, allow in scrapes:
        # a changed check is a new object (as the caches make them); an unchanged one stays the same object
        scene.rows = [old if old == new else new for old, new in zip(scene.rows, rows, strict=False)] + \
            rows[len(scene.rows):]
        scene.summary = summary_of(*details)
        scene.config = metrics_config(style, suppress_error_label=suppress, label_value_max_length=cut,
                                      label_allowlist=list(allow))
        for accept in accepts:
            fmt = format_of(choose_encoder(accept)[0])
            assert encode(scene.registry, fmt) == afresh(scene, accept)
            assert encode(scene.registry, fmt) == choose_encoder(accept)[0](scene.registry)  # its samples too


def renders_counted(monkeypatch: Any) -> list[str]:
    """The names of the families exposition.render is called for, from now on, in order."""
    rendered: list[str] = []
    real = exposition.render

    def counting(metric: Any, fmt: Format) -> str:
        rendered.append(metric.name)
        return real(metric, fmt)
    monkeypatch.setattr(exposition, "render", counting)
    return rendered


def test_a_scrape_of_unchanged_checks_renders_none_of_their_samples_again(monkeypatch: Any) -> None:
    scene = Scene(metrics_config())
    scene.rows = [row(f"c{i}", successCount=i, lastOK="2024-05-01T11:59:00Z", windows={"24h": {"uptime": 0.5}})
                  for i in range(40)]
    scene.summary = summary_of(*(khstate("ns", f"c{i}", OK=True, RunDuration="1s") for i in range(40)))
    rendered = renders_counted(monkeypatch)
    first = encode(scene.registry, Format())
    # the 40 checks' parts rendered together, once (and the family's header, unless an earlier scrape made it)
    assert 1 <= rendered.count("kuberhealthy_check_runs") <= 2
    rendered.clear()
    second = encode(scene.registry, Format())
    assert second == first
    assert "kuberhealthy_check_runs" not in rendered and "kuberhealthy_check" not in rendered
    assert rendered.count("kuberhealthy_check_seconds_since_success") == 1  # the one that moves with the clock
    rendered.clear()
    scene.rows[7] = dataclasses.replace(scene.rows[7], view={**scene.rows[7].view, "successCount": 99})
    third = encode(scene.registry, Format())
    assert rendered.count("kuberhealthy_check_runs") == 1  # the changed check's, alone
    assert rendered.count("kuberhealthy_check_interval_seconds") == 0  # a value it did not change
    assert 'kuberhealthy_check_runs_total{check="ns/c7",namespace="ns",result="ok"} 99.0' in third.decode()


def test_an_openmetrics_scrape_ends_with_eof_once() -> None:
    scene = Scene(metrics_config())
    scene.rows = [row("a")]
    text = encode(scene.registry, format_of(choose_encoder("application/openmetrics-text")[0])).decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1


def test_error_labels_with_carriage_returns_and_unicode_line_separators_are_still_rendered_in_one_call(
        monkeypatch: Any) -> None:
    # prometheus-client escapes only "\n" in a label value: a checker's "\r\n", U+0085 or U+2028 stays raw
    # inside its sample's line, so the family's text is split at "\n" alone
    scene = Scene(metrics_config())
    names = [f"c{i}" for i in range(12)]
    scene.rows = [row(name) for name in names]
    scene.summary = summary_of(*(khstate("ns", name, OK=False, Errors=[f"{name} down\r\nsee\x85logs\u2028now"])
                                 for name in names))
    rendered = renders_counted(monkeypatch)
    text = encode(scene.registry, Format())
    assert 1 <= rendered.count("kuberhealthy_check") <= 2
    assert text == afresh(scene, "")
    assert "c3 down\r\\nsee\x85logs\u2028now" in text.decode()
