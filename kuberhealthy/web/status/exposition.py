"""The bytes of `/metrics`: prometheus-client's encoders, with each check's sample text kept between scrapes.

prometheus-client renders every line; what this adds is when. A scrape of 1,000 checks is some 20,000
samples: built as Metric objects and rendered afresh, that is most of a scrape's CPU (about 0.1 s on a
quiet core, 0.4 s on the shared test bed), every 15 s, for values that mostly did not change. So the
per-check families (web/status/metrics.py) are TextFamily: their samples come in Parts, one per check,
and a Part keeps the text prometheus-client rendered for it, per format, for as long as the collector
keeps the Part (RowCache: while the check's inputs are the same objects, and a family's values are the
same); the Parts a scrape finds without text are rendered in one encoder call per family and split by
line. encode() writes a TextFamily as its header (rendered once per format) and its Parts' text; every
other family as prometheus-client renders it. The result is byte for byte generate_latest()'s (the
tests hold it to that), in both formats and every escaping choose_encoder() picks, and a TextFamily's
`samples` are made from the Parts' values when read, so prometheus-client's own encoders still work on
the registry.

Not here: what the families say (web/status/metrics.py), HTTP (web/status/routes.py).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

EOF = "# EOF\n"  # what ends an OpenMetrics exposition
Values = tuple[tuple[tuple[str, ...], float], ...]  # a Part's samples: (label values, value)


class Format(NamedTuple):
    """What choose_encoder() picked: OpenMetrics or the text format, the name escaping, the version."""

    openmetrics: bool = False
    escaping: str = om.UNDERSCORES
    version: str = "1.0.0"


PLAIN = Format()


def format_of(encoder: Callable[..., bytes]) -> Format:
    """The Format of an encoder choose_encoder() returned (a function, or a partial of one with its options)."""
    func = getattr(encoder, "func", encoder)
    options: dict[str, Any] = getattr(encoder, "keywords", None) or {}
    return Format(func is om.generate_latest, str(options.get("escaping", om.UNDERSCORES)),
                  str(options.get("version", "1.0.0")))


class _One(Collector):
    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> list[Metric]:
        return [self._metric]


def render(metric: Metric, fmt: Format) -> str:
    """One family as prometheus-client's encoder of `fmt` writes it (without OpenMetrics' closing EOF)."""
    if fmt.openmetrics:
        raw: bytes = om.generate_latest(_One(metric), escaping=fmt.escaping,  # type: ignore[no-untyped-call]
                                        version=fmt.version)
        return raw.decode("utf-8").removesuffix(EOF)
    return generate_latest(_One(metric), escaping=fmt.escaping).decode("utf-8")


@functools.lru_cache(maxsize=512)
def _header(make: Callable[[], Metric], fmt: Format) -> str:
    return render(make(), fmt)


class Part:
    """One check's samples of one family, and their text per format, rendered when first asked."""

    __slots__ = ("_text", "values")

    def __init__(self, values: Values) -> None:
        self.values = values
        self._text: dict[Format, str] = {}

    def text(self, family: TextFamily, fmt: Format) -> str:
        text = self._text.get(fmt)
        if text is None:
            head = _header(family.make, fmt)
            whole = render(family.filled((self,)), fmt)
            if not whole.startswith(head):  # a prometheus-client that lays a family out otherwise
                raise RuntimeError(f"{family.name}: the rendered family does not start with its header")
            text = self._text[fmt] = whole[len(head):]
        return text


class TextFamily(Metric):
    """A family of per-check Parts. `make` gives the family empty (a GaugeMetricFamily or CounterMetricFamily
    with its label names; one function per family and label set, as encode() keeps its header by it)."""

    def __init__(self, make: Callable[[], Metric], parts: Sequence[Part] = ()) -> None:
        empty = make()
        super().__init__(empty.name, empty.documentation, empty.type, empty.unit)
        self.make = make
        self.parts = list(parts)

    def filled(self, parts: Sequence[Part]) -> Metric:
        """The family as prometheus-client builds it, holding these Parts' samples."""
        metric = self.make()
        add = getattr(metric, "add_metric")  # noqa: B009  # every family class has one; Metric does not say so
        for part in parts:
            for labels, value in part.values:
                add(list(labels), value)
        return metric

    @property  # Metric's is an attribute; a TextFamily's are made from its Parts when read
    def samples(self) -> list[Sample]:
        return self.filled(self.parts).samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:  # Metric.__init__ sets it empty; nothing else may
            raise AttributeError("a TextFamily's samples are its Parts'")

    def text(self, fmt: Format) -> str:
        head = _header(self.make, fmt)
        new = [part for part in self.parts if fmt not in part._text]
        if len(new) > 1:
            self._render_together(new, head, fmt)
        return head + "".join(part.text(self, fmt) for part in self.parts)

    def _render_together(self, parts: Sequence[Part], head: str, fmt: Format) -> None:
        """Render the Parts without text in one family, and give each its own lines (one per sample):
        the cost of an encoder call is paid once per family, not once per changed check. Where the lines
        do not match the samples one to one (a layout this does not know), each Part renders alone."""
        metric, counts = self.make(), []
        add = getattr(metric, "add_metric")  # noqa: B009  # as in filled()
        for part in parts:
            before = len(metric.samples)
            for labels, value in part.values:
                add(list(labels), value)
            counts.append(len(metric.samples) - before)
        whole = render(metric, fmt)
        if not whole.startswith(head):
            return
        body = whole[len(head):]
        if not body.endswith("\n"):
            return
        # at "\n" alone: a label value keeps a raw "\r", U+0085 or U+2028 (only "\n" is escaped)
        lines = [line + "\n" for line in body[:-1].split("\n")]
        if len(lines) != sum(counts) or any(line.startswith("#") for line in lines):
            return
        at = 0
        for part, count in zip(parts, counts, strict=True):
            part._text[fmt] = "".join(lines[at:at + count])
            at += count


def encode(registry: Collector, fmt: Format = PLAIN) -> bytes:
    """What prometheus-client's encoder of `fmt` writes for the registry."""
    out = [metric.text(fmt) if isinstance(metric, TextFamily) else render(metric, fmt)
           for metric in registry.collect()]
    if fmt.openmetrics:
        out.append(EOF)
    return "".join(out).encode("utf-8")


class RowCache:
    """Each check's Parts of a collector's TextFamilies, kept from scrape to scrape while the check's row is
    the same object (the caches hand out a new one when anything of it changed) in the same context (label
    names and style); a changed row's families whose values did not change keep their Parts, and their text.
    Rows not seen in a scrape are dropped at its end (sweep)."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[object, Hashable, tuple[Part, ...]]] = {}
        self._seen: dict[Hashable, tuple[object, Hashable, tuple[Part, ...]]] = {}

    def parts(self, key: Hashable, row: object, context: Hashable,
              values: Callable[[], Sequence[Values]]) -> tuple[Part, ...]:
        """The row's Parts, one per family; `values` gives each family's samples when they must be made."""
        kept = self._kept.get(key)
        if kept is not None and kept[0] is row and kept[1] == context:
            self._seen[key] = kept
            return kept[2]
        old = kept[2] if kept is not None and kept[1] == context else ()
        made = tuple(old[i] if i < len(old) and old[i].values == v else Part(v) for i, v in enumerate(values()))
        self._seen[key] = (row, context, made)
        return made

    def sweep(self) -> None:
        """End a scrape: keep only the rows it saw."""
        self._kept, self._seen = self._seen, {}


def families(makers: Sequence[Callable[[], Metric]], rows: Iterator[tuple[Part, ...]]) -> list[TextFamily]:
    """TextFamilies of these makers, the i-th holding every row's i-th Part."""
    out = [TextFamily(make) for make in makers]
    for parts in rows:
        for family, part in zip(out, parts, strict=True):
            if part.values:
                family.parts.append(part)
    return out
