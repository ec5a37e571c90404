"""The rows `make attack` prints: what was tried, what the daemon answered, probe latency, genuine reports."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Row:
    scenario: str  # the module's name, e.g. "slow"
    tried: str  # what the attacker did, one line
    answered: str  # what the daemon answered the attacker, e.g. "closed after 5.0 s (200/200)"
    probe_p99_ms: float | None  # p99 of /healthz, /readyz, / and /status during the attack (None: not measured)
    genuine: str  # genuine reports accepted, e.g. "12/12, p99 40 ms" ("-" where none were sent)
    target: str  # the target, one line, e.g. "probes p99 <= 1000 ms; every genuine report 200"
    ok: bool  # the target held
    notes: list[str] = dataclasses.field(default_factory=list)


def ms(value: float | None) -> str:
    """Milliseconds as the table shows them: whole numbers, "-" when not measured."""
    return "-" if value is None else f"{value:.0f}"


def fmt_table(rows: list[Row]) -> str:
    head = ["scenario", "tried", "answered", "probe p99 ms", "genuine reports", "target", "verdict"]
    body = [[r.scenario, r.tried, r.answered, ms(r.probe_p99_ms),
             r.genuine, r.target, "PASS" if r.ok else "MISS"] for r in rows]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    out = [line(head), sep, *(line(r) for r in body)]
    for r in rows:
        out.extend(f"   {r.scenario}: {n}" for n in r.notes)
    return "\n".join(out)
