"""The status page summary and its bytes: v2's rules and Go's MarshalIndent layout, byte for byte.

The golden strings were produced by Go's encoding/json (MarshalIndent with v2's State and
WorkloadDetails field layout, metav1.Time semantics for LastRun) and pasted here.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kuberhealthy.kube.mappedcache import MappedCache
from kuberhealthy.records import hcstate, migration
from kuberhealthy.records.khstate import FINISHED_UUID, RUN_POD, was_run
from kuberhealthy.web.gojson import go_json_string, go_time, is_blank, valid_text
from kuberhealthy.web.status import page as page_module
from kuberhealthy.web.status.page import StatusCache, details_of, render, summarize
from testbed.cluster.builders import khstate as khstate_body

GOLDEN = (
    '{\n'
    '  "OK": false,\n'
    '  "Errors": [\n'
    '    "a \\u003cb\\u003e \\u0026 \\"c\\"",\n'
    '    "tab\\there\\u0008\\u000c\\u0001\x7f é \\u2028\\u2029 \\\\"\n'
    '  ],\n'
    '  "CheckDetails": {\n'
    '    "aa/c": {\n'
    '      "OK": true,\n'
    '      "Errors": [],\n'
    '      "RunDuration": "",\n'
    '      "Namespace": "aa",\n'
    '      "Node": "",\n'
    '      "AuthoritativePod": "kh-1",\n'
    '      "uuid": "u2"\n'
    '    },\n'
    '    "aa/n": {\n'
    '      "OK": true,\n'
    '      "Errors": null,\n'
    '      "RunDuration": "",\n'
    '      "Namespace": "aa",\n'
    '      "Node": "",\n'
    '      "LastRun": null,\n'
    '      "AuthoritativePod": "kh-1",\n'
    '      "uuid": ""\n'
    '    },\n'
    '    "zz/b": {\n'
    '      "OK": false,\n'
    '      "Errors": [\n'
    '        "a \\u003cb\\u003e \\u0026 \\"c\\"",\n'
    '        "tab\\there\\u0008\\u000c\\u0001\x7f é \\u2028\\u2029 \\\\"\n'
    '      ],\n'
    '      "RunDuration": "1.5s",\n'
    '      "Namespace": "zz",\n'
    '      "Node": "n1",\n'
    '      "LastRun": "2022-03-22T07:22:56Z",\n'
    '      "AuthoritativePod": "kh-0",\n'
    '      "uuid": "u1"\n'
    '    }\n'
    '  },\n'
    '  "JobDetails": {\n'
    '    "aa/j": {\n'
    '      "OK": true,\n'
    '      "Errors": [],\n'
    '      "RunDuration": "2m3s",\n'
    '      "Namespace": "aa",\n'
    '      "Node": "n2",\n'
    '      "AuthoritativePod": "kh-1",\n'
    '      "uuid": "u3"\n'
    '    }\n'
    '  },\n'
    '  "CurrentMaster": "kh-0"\n'
    '}'
)

GOLDEN_EMPTY = '{\n  "OK": true,\n  "Errors": [],\n  "CheckDetails": {},\n  "JobDetails": {},\n  "CurrentMaster": ""\n}'

WEIRD = "tab\there\b\f\x01\x7f é \u2028\u2029 \\"


def khstate(ns: str, name: str, rv: str = "1", finished: str | None = None, **spec: Any) -> dict[str, Any]:
    """`finished`: the uuid of the last run that is over; given, the spec's run is in flight (claimed by
    this daemon, its pod named in the claim). Not given: a khstate as v2 (or a test) writes it."""
    annotations = {} if finished is None else {RUN_POD: f"{name}-1", **({FINISHED_UUID: finished} if finished else {})}
    body = khstate_body(name, **spec)
    body["metadata"].update(namespace=ns, resourceVersion=rv, annotations=annotations)
    return body


def golden_objects() -> list[dict[str, Any]]:
    return [
        khstate("zz", "b", OK=False, Errors=['a <b> & "c"', WEIRD], RunDuration="1.5s", Namespace="zz",
                Node="n1", LastRun="2022-03-22T09:22:56.789+02:00", AuthoritativePod="kh-0", uuid="u1"),
        khstate("aa", "c", OK=True, Errors=[], RunDuration="", Namespace="aa", Node="", AuthoritativePod="kh-1",
                uuid="u2"),
        khstate("aa", "n", OK=True, Namespace="aa", LastRun="0001-01-01T00:00:00Z", AuthoritativePod="kh-1"),
        khstate("aa", "j", OK=True, Errors=[], RunDuration="2m3s", Namespace="aa", Node="n2",
                AuthoritativePod="kh-1", uuid="u3", khWorkload="KHJob"),
        khstate("aa", "never", OK=True, Errors=["hidden"], Namespace="aa", AuthoritativePod="", uuid="u4"),
    ]


class FakeStore:
    """A reflector stand-in: objects by key, listeners, and a count of list() calls."""

    def __init__(self, objs: list[dict[str, Any]] | None = None) -> None:
        self.objs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs or []}
        self.listeners: list[Callable[[str, Any, Any], None]] = []
        self.lists = 0

    def list(self) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.objs.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objs.get(f"{namespace}/{name}")

    def add_listener(self, fn: Callable[[str, Any, Any], None]) -> None:
        self.listeners.append(fn)

    def put(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        prev = self.objs.get(key)
        self.objs[key] = obj
        for fn in self.listeners:
            fn("MODIFIED" if prev else "ADDED", obj, prev)

    def delete(self, ns: str, name: str) -> None:
        obj = self.objs.pop(f"{ns}/{name}")
        for fn in self.listeners:
            fn("DELETED", obj, obj)


def entries(objs: list[dict[str, Any]], jobs: frozenset[str] = frozenset()) -> list[Any]:
    def is_job(o: dict[str, Any]) -> bool:
        spec = o.get("spec")
        return (isinstance(spec, dict) and spec.get("khWorkload") == "KHJob") or \
            f"{o['metadata']['namespace']}/{o['metadata']['name']}" in jobs
    return sorted((details_of(o, is_job(o)) for o in objs), key=lambda d: d.key)


def test_the_page_matches_gos_marshal_indent_byte_for_byte() -> None:
    page = render(summarize(entries(golden_objects())), "kh-0")
    assert page.decode("utf-8") == GOLDEN


def test_an_empty_cache_renders_like_a_fresh_v2_state() -> None:
    assert render(summarize([]), "") == GOLDEN_EMPTY.encode()


def test_never_run_checks_are_hidden_and_do_not_count_their_errors() -> None:
    s = summarize(entries([khstate("a", "x", OK=False, Errors=["boom"], AuthoritativePod="")]))
    assert s.ok and s.errors == () and s.checks == ()


def test_top_level_errors_collect_every_non_blank_error_of_checks_and_jobs() -> None:
    objs = [khstate("a", "x", OK=False, Errors=["e1", "  ", "e2"], Namespace="a", AuthoritativePod="p"),
            khstate("a", "y", OK=False, Errors=["\u3000\t"], Namespace="a", AuthoritativePod="p"),
            khstate("b", "j", OK=False, Errors=["job failed"], Namespace="b", AuthoritativePod="p")]
    s = summarize(entries(objs, jobs=frozenset({"b/j"})))
    assert not s.ok
    assert s.errors == ("e1", "e2", "job failed")
    assert [d.key for d in s.checks] == ["a/x", "a/y"] and [d.key for d in s.jobs] == ["b/j"]
    assert json.loads(render(s, "m"))["CheckDetails"]["a/x"]["Errors"] == ["e1", "  ", "e2"]


def test_a_check_with_ok_false_but_no_errors_leaves_the_top_level_ok_as_v2_does() -> None:
    s = summarize(entries([khstate("a", "x", OK=False, Errors=[], Namespace="a", AuthoritativePod="p")]))
    assert s.ok


def test_the_namespace_filter_keeps_only_those_namespaces_and_their_errors() -> None:
    objs = [khstate("a", "x", OK=False, Errors=["ea"], Namespace="a", AuthoritativePod="p"),
            khstate("b", "y", OK=True, Errors=[], Namespace="b", AuthoritativePod="p"),
            khstate("c", "z", OK=False, Errors=["ec"], Namespace="c", AuthoritativePod="p")]
    doc = json.loads(render(summarize(entries(objs), {"b", "c"}), ""))
    assert sorted(doc["CheckDetails"]) == ["b/y", "c/z"]
    assert doc["Errors"] == ["ec"] and doc["OK"] is False
    doc = json.loads(render(summarize(entries(objs), {"b"}), ""))
    assert doc["OK"] is True and doc["Errors"] == []


def test_a_blank_spec_namespace_falls_back_to_the_objects_namespace_for_filtering() -> None:
    d = details_of(khstate("a", "x", OK=True, AuthoritativePod="p"), False)
    assert d.namespace == "a" and d.spec_namespace == ""


def test_malformed_khstates_render_without_crashing() -> None:
    objs = [{"metadata": {"namespace": "a", "name": "x"}, "spec": "nonsense"},
            khstate("a", "y", OK="yes", Errors="oops", LastRun="yesterday", AuthoritativePod=3),
            khstate("a", "z", OK=True, Errors=[1, None, "e"], AuthoritativePod="p", LastRun="2020-01-01")]
    doc = json.loads(render(summarize(entries(objs)), ""))
    assert list(doc["CheckDetails"]) == ["a/z"]
    assert doc["CheckDetails"]["a/z"]["Errors"] == ["", "", "e"]
    assert "LastRun" not in doc["CheckDetails"]["a/z"]


def test_last_run_is_re_formatted_like_metav1_time() -> None:
    assert go_time("2022-03-22T09:22:56.789+02:00") == '"2022-03-22T07:22:56Z"'
    assert go_time("2022-03-22T07:22:56Z") == '"2022-03-22T07:22:56Z"'
    assert go_time("0001-01-01T00:00:00Z") == "null"
    assert go_time(None) is None and go_time("") is None and go_time("2022-13-01T00:00:00Z") is None


def test_go_escaping_of_html_characters_and_line_separators() -> None:
    assert go_json_string("<a&b>") == '"\\u003ca\\u0026b\\u003e"'
    assert go_json_string("\u2028\u2029") == '"\\u2028\\u2029"'
    assert go_json_string("\b\f\x00\x1f") == '"\\u0008\\u000c\\u0000\\u001f"'
    assert go_json_string("é\x7f") == '"é\x7f"'
    assert go_json_string("\ud800") == '"\\ufffd"'


@given(st.text())  # examples: the profile (tests/unit/conftest.py)
def test_go_json_strings_decode_back_and_never_contain_html_specials(text: str) -> None:
    encoded = go_json_string(text)
    assert json.loads(encoded) == valid_text(text)
    assert not set(encoded) & set("<>&\u2028\u2029\b\f")
    encoded.encode("utf-8")


def test_blank_means_what_gos_trim_space_trims() -> None:
    assert is_blank("") and is_blank(" \t\n\u00a0\u3000")
    assert not is_blank("\x1c")  # Python calls this whitespace; Go does not


def test_the_cache_rebuilds_only_after_a_change_and_reuses_unchanged_fragments() -> None:
    store = FakeStore(golden_objects())
    cache = StatusCache(store).attach()
    first = cache.page("kh-0")
    assert store.lists == 1
    for _ in range(5):
        assert cache.page("kh-0") is first
    assert store.lists == 1
    before = {d.key: d for d in cache.summary().checks}
    store.put(khstate("aa", "c", rv="2", OK=False, Errors=["now failing"], Namespace="aa",
                      AuthoritativePod="kh-1", uuid="u2"))
    second = cache.page("kh-0")
    assert store.lists == 1  # a changed khstate is read by its key, not by listing them all again
    doc = json.loads(second)
    assert doc["CheckDetails"]["aa/c"]["Errors"] == ["now failing"]
    after = {d.key: d for d in cache.summary().checks}
    assert after["zz/b"] is before["zz/b"] and after["aa/c"] is not before["aa/c"]


def test_the_page_follows_the_current_master_without_a_rebuild() -> None:
    store = FakeStore(golden_objects())
    cache = StatusCache(store).attach()
    assert json.loads(cache.page("a"))["CurrentMaster"] == "a"
    assert json.loads(cache.page("b"))["CurrentMaster"] == "b"
    assert store.lists == 1


def test_a_deleted_khstate_leaves_the_page() -> None:
    store = FakeStore(golden_objects())
    cache = StatusCache(store).attach()
    assert "zz/b" in json.loads(cache.page(""))["CheckDetails"]
    store.delete("zz", "b")
    doc = json.loads(cache.page(""))
    assert "zz/b" not in doc["CheckDetails"] and doc["OK"] is True


def test_a_khstate_moves_to_job_details_when_its_khjob_appears() -> None:
    states = FakeStore([khstate("a", "x", OK=True, Errors=[], Namespace="a", AuthoritativePod="p")])
    jobs = FakeStore()
    cache = StatusCache(states, jobs).attach()
    assert list(json.loads(cache.page(""))["CheckDetails"]) == ["a/x"]
    jobs.put({"metadata": {"namespace": "a", "name": "x", "resourceVersion": "5"}, "spec": {}})
    doc = json.loads(cache.page(""))
    assert doc["CheckDetails"] == {} and list(doc["JobDetails"]) == ["a/x"]


def test_a_filtered_page_is_rendered_from_the_same_fragments() -> None:
    store = FakeStore(golden_objects())
    cache = StatusCache(store).attach()
    full = json.loads(cache.page("m"))
    part = json.loads(cache.page("m", ["zz"]))
    assert part["CheckDetails"] == {"zz/b": full["CheckDetails"]["zz/b"]}
    assert part["JobDetails"] == {}


def test_the_page_never_shows_the_uuid_of_a_run_in_flight_only_the_last_finished_runs() -> None:
    in_flight = khstate("aa", "c", finished="previous-run", OK=True, Errors=[], Namespace="aa",
                        AuthoritativePod="kh-1", uuid="live-run")
    never_finished = khstate("aa", "d", finished="", OK=True, Errors=[], Namespace="aa", AuthoritativePod="kh-1",
                             uuid="live-too")
    done = khstate("aa", "e", finished="done-run", OK=True, Errors=[], Namespace="aa", AuthoritativePod="kh-1",
                   uuid="done-run")
    page = render(summarize(entries([in_flight, never_finished, done])), "kh-1").decode()
    assert "live-run" not in page and "live-too" not in page
    assert json.loads(page)["CheckDetails"]["aa/c"]["uuid"] == "previous-run"
    assert json.loads(page)["CheckDetails"]["aa/d"]["uuid"] == ""
    assert json.loads(page)["CheckDetails"]["aa/e"]["uuid"] == "done-run"


def test_a_khstate_knows_its_last_finished_run_and_the_runs_in_its_history_as_runs_that_are_over() -> None:
    body = khstate_body("probe", uuid="current")
    body["metadata"]["annotations"] = {FINISHED_UUID: "last"}
    body["spec"]["history"] = [{"uuid": "older"}, "not an entry", {"uuid": ""}]
    assert was_run(body, "last") and was_run(body, "older")
    assert not was_run(body, "never") and not was_run(body, "") and not was_run(None, "last")
    body["spec"]["history"] = "nonsense"
    assert was_run(body, "last") and not was_run(body, "older")


def test_after_one_khstate_changed_only_its_entry_is_made_again(monkeypatch: Any) -> None:
    store = FakeStore([khstate("ns", f"c{i:02d}", OK=True, Errors=[], Namespace="ns", AuthoritativePod="kh-0")
                       for i in range(50)])
    cache = StatusCache(store).attach()
    cache.page("kh-0")
    made: list[str] = []
    real = page_module.details_of
    monkeypatch.setattr(page_module, "details_of", lambda obj, *a, **k: made.append(obj["metadata"]["name"])
                        or real(obj, *a, **k))
    store.put(khstate("ns", "c07", rv="2", OK=False, Errors=["down"], Namespace="ns", AuthoritativePod="kh-0"))
    doc = json.loads(cache.page("kh-0"))
    assert made == ["c07"] and doc["OK"] is False and doc["Errors"] == ["down"]
    assert list(doc["CheckDetails"]) == sorted(doc["CheckDetails"])  # still in key order


def test_a_new_khstate_takes_its_place_in_key_order_and_a_khjob_moves_it_without_a_new_list() -> None:
    store = FakeStore([khstate("b", "x", OK=True, Errors=[], Namespace="b", AuthoritativePod="p")])
    jobs = FakeStore()
    cache = StatusCache(store, jobs).attach()
    cache.page("")
    store.put(khstate("a", "y", OK=True, Errors=[], Namespace="a", AuthoritativePod="p"))
    store.put(khstate("c", "z", OK=True, Errors=[], Namespace="c", AuthoritativePod="p"))
    assert list(json.loads(cache.page(""))["CheckDetails"]) == ["a/y", "b/x", "c/z"]
    jobs.put({"metadata": {"namespace": "c", "name": "z", "resourceVersion": "5"}, "spec": {}})
    doc = json.loads(cache.page(""))
    assert list(doc["CheckDetails"]) == ["a/y", "b/x"] and list(doc["JobDetails"]) == ["c/z"]


_CHANGE = st.tuples(st.sampled_from(["put", "delete", "job", "unjob"]), st.integers(0, 5), st.booleans())


@given(st.lists(_CHANGE, max_size=25))
def test_a_page_kept_up_to_date_change_by_change_equals_one_built_from_scratch(changes: list[Any]) -> None:
    states = FakeStore([khstate("n", f"s{i}", OK=True, Errors=[], Namespace="n", AuthoritativePod="p")
                        for i in range(0, 6, 2)])
    jobs = FakeStore()
    kept = StatusCache(states, jobs).attach()
    for n, (what, i, ok) in enumerate(changes):
        name = f"s{i}"
        if what == "put":
            states.put(khstate("n", name, rv=str(n + 2), OK=ok, Errors=[] if ok else [f"e{n}"], Namespace="n",
                               AuthoritativePod="p" if n % 3 else ""))
        elif what == "delete" and f"n/{name}" in states.objs:
            states.delete("n", name)
        elif what == "job":
            jobs.put({"metadata": {"namespace": "n", "name": name, "resourceVersion": str(n + 2)}, "spec": {}})
        elif what == "unjob" and f"n/{name}" in jobs.objs:
            jobs.delete("n", name)
        if n % 2:
            kept.page("m")
    assert kept.page("m") == StatusCache(states, jobs).attach().page("m")


def _hc(name: str, rv: str, ok: bool = True, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "n", "name": name, "resourceVersion": rv, "uid": f"uid-{name}",
                         "annotations": annotations or {}},
            "spec": {"runInterval": "1m"},
            "status": {"ok": ok, "errors": [] if ok else ["hc down"], "runDuration": 1_000_000_000,
                       "namespace": "n", "lastRunUnix": 1_796_300_000,
                       "runBinding": {"uuid": "u", "authoritativePod": "p", "finishedUUID": "u"}}}


def test_a_healthchecks_status_write_remakes_its_entry_alone_and_a_migration_mark_hides_the_khstate(
        monkeypatch: Any) -> None:
    states = FakeStore([khstate("n", "old", OK=True, Errors=[], Namespace="n", AuthoritativePod="p")])
    khchecks = FakeStore([{"metadata": {"namespace": "n", "name": "old", "uid": "uid-old", "resourceVersion": "1",
                                        "annotations": {migration.MIGRATED_TO: "new"}}, "spec": {}}])
    hcs = FakeStore([_hc("new", "1"), _hc("other", "1")])
    cache = StatusCache(states, None, khchecks, healthchecks=hcs, hc_states=MappedCache(hcs, hcstate.view)).attach()
    assert list(json.loads(cache.page(""))["CheckDetails"]) == ["n/new", "n/old", "n/other"]
    made: list[str] = []
    real = page_module.details_of
    monkeypatch.setattr(page_module, "details_of", lambda obj, *a, **k: made.append(obj["metadata"]["name"])
                        or real(obj, *a, **k))
    hcs.put(_hc("other", "2", ok=False))
    doc = json.loads(cache.page(""))
    assert made == ["other"] and doc["Errors"] == ["hc down"]
    hcs.put(_hc("new", "3", annotations={migration.MIGRATED_FROM: "uid-old"}))  # now the khcheck's pair
    assert list(json.loads(cache.page(""))["CheckDetails"]) == ["n/new", "n/other"]
