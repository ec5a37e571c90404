"""TimeBudget: seconds spent per named part against a budget, said as each part ends and summed at the end
(the e2e session's and the release rehearsal's; a part over budget is said, never failed)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field


@dataclass
class TimeBudget:
    budgets: Mapping[str, float]
    say: Callable[[str], None]
    spent: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + time.monotonic() - started
            self.say(self.line(name))

    def line(self, name: str) -> str:
        spent, budget = self.spent.get(name, 0.0), self.budgets[name]
        return f"{name}: {spent:.0f} s of a {budget:.0f} s budget" + (" -- OVER BUDGET" if spent > budget else "")

    def summary(self) -> str:
        parts = [self.line(n) for n in self.budgets if n in self.spent]
        total = sum(self.spent.values())
        return f"time budget: {'; '.join(parts)}; total {total:.0f} s of {sum(self.budgets.values()):.0f} s"
