"""`make bench BENCH_ARGS="--against REF"`: the daemon's CPU per run, this working tree beside an older commit.

For each size (default 250 and 500 checks) and round (default 2), bench/scale.py's `measure` runs twice on a
fresh test bed each time: once with the daemon of REF, once with the daemon of this tree, old first in odd
rounds and new first in even ones, so a drift of the machine's load over the hour weighs on both sides
alike. REF's `kuberhealthy/` is unpacked with `git archive` into a temporary directory (removed at the end)
and its daemon runs on this interpreter with that directory shadowing the editable install
(testbed/daemons/process.py `source`); its log must show it imported the package from there, or the
measurement does not count.

  CPU per run    daemon CPU seconds over the window (utime+stime of the gunicorn arbiter and worker)
                 divided by the runs started in the window (checker pods first seen in it);
  new/old        per round, CPU per run of this tree over that of REF; the overall ratio at a size is
                 the median of its rounds' ratios (the target, printed beside it, is <= 0.6x).
Also shown per measurement: runs, daemon CPU in cores, API requests per run, peak PSS, `/` p99, false
failures. It reports and does not judge: exit 0 unless nothing could be measured (then 2).
Logs are kept under --results (default /tmp/kh-versus-<time>/n<N>-r<round>-<old|new>/), and versus.md.

With --floor, bench.floor runs after each round (its own test bed, about a minute and a half) and each side's
CPU per run is also shown over that floor: the same-window answer to "how far above the bare work is it".

Usage: python -m bench.versus --against REF [--checks 250,500] [--rounds 2] [--interval 60] [--intervals 3] [--floor]
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale import harness_args, measure, product_state
from bench.scalereport import fmt_s, print_details
from testbed.daemons.process import imported_from
from testbed.paths import REPO

OLD, NEW = "old", "new"
TARGET_RATIO = 0.6

logger = logging.getLogger("bench.versus")


# --- what one comparison is made of (pure) ----------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """What the table shows of one measurement (a bench.scale row)."""

    runs: int
    cores: float
    cpu_per_run_ms: float | None
    api_per_run: float | None
    peak_pss_mb: float
    root_p99_s: float | None
    false_failures: int
    refused: int
    khstate_kb: float | None = None  # the mean khstate at the end, compact JSON
    per_kubelet: float | None = None  # daemon CPU over the simulated kubelet's in the window (see ratio())


@dataclass(frozen=True)
class Measured:
    round: int
    n: int
    side: str  # OLD or NEW
    row: dict[str, Any]


def schedule(sizes: Sequence[int], rounds: int) -> list[tuple[int, int, str]]:
    """(round, size, side) in the order they run: per round, per size, old then new in odd rounds and new
    then old in even ones."""
    order: list[tuple[int, int, str]] = []
    for r in range(1, rounds + 1):
        for n in sizes:
            order += [(r, n, side) for side in ((OLD, NEW) if r % 2 else (NEW, OLD))]
    return order


def figures(row: dict[str, Any]) -> Figures | None:
    """The figures of a measured row; None for a row that could not be measured."""
    if "error" in row:
        return None
    cpu, runs = row["cpu"], int(row["runs"])
    seconds = cpu.get("daemon_seconds", cpu["daemon"] * row["window_s"])
    return Figures(runs=runs, cores=cpu["daemon"], cpu_per_run_ms=seconds * 1000 / runs if runs else None,
                   api_per_run=row["api"]["per_run"], peak_pss_mb=row["mem"]["peak_pss_mb"],
                   root_p99_s=row["status_page"]["p99"], false_failures=int(row["false_failures"]["results"]),
                   refused=int(row["sim"].get("refused_total") or 0),
                   khstate_kb=(row["khstate_bytes"]["mean"] / 1024) if row.get("khstate_bytes") else None,
                   per_kubelet=_per_kubelet(seconds, cpu, row["window_s"]))


def _per_kubelet(daemon_seconds: float, cpu: dict[str, Any], window_s: float) -> float | None:
    sim = cpu.get("sim_seconds", cpu.get("sim", 0.0) * window_s)
    return daemon_seconds / sim if sim else None


def ratio(new: Figures | None, old: Figures | None) -> float | None:
    """CPU per run of new over old; None when either is missing."""
    if new is None or old is None or new.cpu_per_run_ms is None or not old.cpu_per_run_ms:
        return None
    return new.cpu_per_run_ms / old.cpu_per_run_ms


def kubelet_ratio(new: Figures | None, old: Figures | None) -> float | None:
    """new over old of the daemon's CPU per unit of the simulated kubelet's CPU in the same window.

    The simulated kubelet does the same work per run whichever daemon runs (it binds, starts, reports for and
    ends each checker pod), so its CPU measures how fast the machine was in that window: on a shared host
    the same code's CPU per run moves by half between windows (steal, other guests), and the kubelet's moves
    with it. Runs cancel out: this is the CPU-per-run ratio with each side divided by its machine's speed."""
    if new is None or old is None or new.per_kubelet is None or not old.per_kubelet:
        return None
    return new.per_kubelet / old.per_kubelet


def middle(values: Sequence[float | None]) -> float | None:
    """The median of the values that are there; None when none is."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


Ratio = Callable[[Figures | None, Figures | None], float | None]


def round_ratios(measured: Sequence[Measured], n: int, by: Ratio = ratio) -> list[tuple[int, float | None]]:
    """(round, new/old) for every round of size n, in round order (`by`: ratio or kubelet_ratio)."""
    by_round: dict[int, dict[str, Figures | None]] = {}
    for m in measured:
        if m.n == n:
            by_round.setdefault(m.round, {})[m.side] = figures(m.row)
    return [(r, by(sides.get(NEW), sides.get(OLD))) for r, sides in sorted(by_round.items())]


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def _ratio_txt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


TABLE_HEADER = ("| measurement | runs | daemon CPU (cores) | CPU per run | new/old | daemon ÷ kubelet CPU "
                "| API req per run | peak PSS | `/` p99 | false failures | khstate (mean) |")


def _line(label: str, f: Figures | None, r: float | None, error: str = "") -> str:
    if f is None:
        return f"| {label} | not measured: {error} | | | | | | | | | |"
    ff = f"{f.false_failures}" + (f" (+{f.refused} refused)" if f.refused else "")
    return (f"| {label} | {f.runs:,} | {f.cores:.3f} | {_num(f.cpu_per_run_ms, '.1f', ' ms')} | {_ratio_txt(r)} "
            f"| {_num(f.per_kubelet, '.2f')} | {_num(f.api_per_run, '.2f')} | {f.peak_pss_mb:.0f} MB "
            f"| {fmt_s(f.root_p99_s)} | {ff} "
            f"| {_num(f.khstate_kb, '.1f', ' KiB')} |")


def _median_figures(fs: Sequence[Figures]) -> Figures | None:
    if not fs:
        return None
    return Figures(runs=round(statistics.median(f.runs for f in fs)), cores=statistics.median(f.cores for f in fs),
                   cpu_per_run_ms=middle([f.cpu_per_run_ms for f in fs]),
                   api_per_run=middle([f.api_per_run for f in fs]),
                   peak_pss_mb=statistics.median(f.peak_pss_mb for f in fs),
                   root_p99_s=middle([f.root_p99_s for f in fs]),
                   false_failures=round(statistics.median(f.false_failures for f in fs)),
                   refused=round(statistics.median(f.refused for f in fs)),
                   khstate_kb=middle([f.khstate_kb for f in fs]),
                   per_kubelet=middle([f.per_kubelet for f in fs]))


def size_table(measured: Sequence[Measured], n: int, labels: dict[str, str]) -> list[str]:
    """The Markdown table of one size: each measurement in round order, the medians of each side, and the
    overall ratio (the median of the rounds' ratios) with its target."""
    ratios = dict(round_ratios(measured, n))
    lines = [f"{n:,} checks", "", TABLE_HEADER, "|" + "---|" * 11]
    for m in sorted((m for m in measured if m.n == n), key=lambda m: (m.round, m.side != OLD)):
        lines.append(_line(f"round {m.round} {m.side} ({labels[m.side]})", figures(m.row),
                           ratios.get(m.round) if m.side == NEW else None, str(m.row.get("error", ""))))
    overall = middle(list(ratios.values()))
    for side in (OLD, NEW):
        fs = [f for m in measured if m.n == n and m.side == side and (f := figures(m.row)) is not None]
        lines.append(_line(f"median {side} ({len(fs)} measured)", _median_figures(fs), overall if side == NEW else None,
                           "no round"))
    lines += ["", f"{n:,} checks: CPU per run new/old {_ratio_txt(overall)} (median of rounds: "
              + (", ".join(_ratio_txt(r) for r in ratios.values()) or "none") + f"); target <= {TARGET_RATIO}x"]
    steady = round_ratios(measured, n, kubelet_ratio)
    lines.append(f"{n:,} checks: normalised by the simulated kubelet's CPU in each window "
                 f"{_ratio_txt(middle([r for _, r in steady]))} (rounds: "
                 + (", ".join(_ratio_txt(r) for _, r in steady) or "none") + ")")
    return lines


def floor_of(output: str) -> float | None:
    """The floor per run (ms) in bench.floor's printout; None when it printed none."""
    m = re.search(r"\*\*floor per run\*\* \| \| \| \*\*([0-9.]+) ms\*\*", output)
    return float(m.group(1)) if m else None


def floor_lines(floors: dict[int, float | None], measured: Sequence[Measured], n: int) -> list[str]:
    """Per round: the floor (bench.floor, measured right after the round's two sides) and each side's
    CPU per run over it, and where the 0.6x target stands against it."""
    lines = []
    for r, ms in sorted(floors.items()):
        sides = {m.side: figures(m.row) for m in measured if m.n == n and m.round == r}
        old, new = sides.get(OLD), sides.get(NEW)
        def over(f: Figures | None, ms: float | None = ms) -> str:
            return "-" if ms is None or f is None or f.cpu_per_run_ms is None else f"{f.cpu_per_run_ms / ms:.2f}x"
        target = "-" if old is None or old.cpu_per_run_ms is None or ms is None else (
            f"{TARGET_RATIO * old.cpu_per_run_ms / ms:.2f}x")
        lines.append(f"{n:,} checks round {r}: floor {_num(ms, '.2f', ' ms')} per run; old {over(old)} the floor, "
                     f"new {over(new)}; the {TARGET_RATIO}x target is {target} the floor")
    return lines


def measure_floor(n: int) -> float | None:
    """Run bench.floor (its own test bed, a bare process doing a run's API requests, watch events and HTTP)
    right after a round, so the floor is measured in the same stretch of the machine as the round."""
    cmd = [sys.executable, "-m", "bench.floor", "--checks", str(n)]
    try:
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False).stdout
    except subprocess.TimeoutExpired:
        logger.warning("bench.floor did not finish within 900 s")
        return None
    ms = floor_of(out)
    if ms is None:
        logger.warning("bench.floor printed no floor: %s", out[-500:])
    return ms


# --- the older commit's source ---------------------------------------------------------------------------

def resolve(ref: str) -> str:
    """The full commit id of `ref` in this repository (ValueError when it names no commit)."""
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise ValueError(f"{ref!r} names no commit of {REPO}")
    return r.stdout.strip()


def unpack(commit: str, into: Path) -> Path:
    """`git archive COMMIT kuberhealthy | tar -x -C into`; `into`, which then holds kuberhealthy/."""
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", "--format=tar", commit, "kuberhealthy"],
                               stdout=subprocess.PIPE)
    try:
        subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    finally:
        if archive.stdout is not None:
            archive.stdout.close()
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {commit} kuberhealthy failed with {archive.returncode}")
    if not (into / "kuberhealthy" / "cli.py").is_file():
        raise RuntimeError(f"{commit} has no kuberhealthy/cli.py")
    return into


def package_seen_from(source: Path) -> str:
    """Where this interpreter imports `kuberhealthy` from with `source` as the daemon gets it (first on
    PYTHONPATH, the working directory): a check before anything is measured."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(source), os.environ.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, "-c", "import kuberhealthy; print(kuberhealthy.__file__)"], cwd=source,
                       env=env, capture_output=True, text=True, check=True)
    return r.stdout.strip()


def provenance(row: dict[str, Any], source: Path) -> str | None:
    """Why the old daemon's measurement does not count (it did not import `source`), or None."""
    path = str((row.get("daemon_log") or {}).get("path") or "")
    try:
        seen = imported_from(Path(path).read_text(errors="replace")) if path else None
    except OSError:
        seen = None
    row["imported_from"] = seen
    if seen is None:
        return f"its log ({path or 'none'}) does not say where kuberhealthy was imported from"
    if not Path(seen).resolve().is_relative_to(source.resolve()):
        return f"it imported kuberhealthy from {seen}, not from {source}"
    return None


# --- the run ----------------------------------------------------------------------------------------------

def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--against", required=True, metavar="REF", help="the older commit or tag to compare with")
    ap.add_argument("--checks", default="250,500", help="comma-separated sizes (default 250,500)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of old and new at each size, alternating order")
    ap.add_argument("--seed-new-only", action="store_true",
                    help="seed only this tree's khstates with a month of rollups (REF's start without any)")
    ap.add_argument("--floor", action="store_true",
                    help="after each round, run bench.floor and show each side's CPU per run over the floor")
    harness_args(ap, "/tmp/kh-versus-<time>")
    return ap.parse_args(argv)


def _one(args: argparse.Namespace, r: int, n: int, side: str, source: Path, outdir: Path) -> Measured:
    args.n, args.source = n, (source if side == OLD else None)
    if args.seed_new_only:  # rollups on (a month in every khstate) against off (none, as before they existed)
        args.seed_rollups = side == NEW
    t = time.monotonic()
    try:
        row = measure(args, outdir)
        why = provenance(row, source) if side == OLD else None
        if why:
            row = {"n": n, "error": f"the old daemon does not count: {why}", "logs": row.get("logs")}
    except Exception as e:  # one measurement failing must not lose the others
        logger.exception("size %d round %d %s could not be measured", n, r, side)
        row = {"n": n, "error": f"{type(e).__name__}: {e}"}
    print_details(row)
    f = figures(row)
    if f is None:
        outcome = f"not measured: {row['error']}"
    else:
        outcome = f"{f.runs} runs, {f.cores:.3f} cores, {_num(f.cpu_per_run_ms, '.1f', ' ms')} per run"
        if side == OLD:
            outcome += f" (kuberhealthy from {row['imported_from']})"
    print(f"  [{n}] round {r} {side}: measured in {time.monotonic() - t:.0f}s; {outcome}", flush=True)
    return Measured(r, n, side, row)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sizes = [int(s) for s in args.checks.split(",") if s.strip()]
    try:
        commit = resolve(args.against)
    except ValueError as e:
        print(f"bench.versus: {e}", file=sys.stderr)
        return 2
    short = commit[:7]
    labels = {OLD: args.against if commit.startswith(args.against) else f"{args.against} = {short}",
              NEW: "working tree"}
    results = Path(args.results or f"/tmp/kh-versus-{time.strftime('%Y%m%d-%H%M%S')}")
    results.mkdir(parents=True, exist_ok=True)
    source = Path(tempfile.mkdtemp(prefix=f"kh-versus-{short}-"))
    measured: list[Measured] = []
    floors: dict[int, dict[int, float | None]] = {}
    try:
        unpack(commit, source)
        seen = package_seen_from(source)
        if not Path(seen).resolve().is_relative_to(source.resolve()):
            print(f"bench.versus: with {source} first on the path, kuberhealthy still comes from {seen}",
                  file=sys.stderr)
            return 2
        tree = product_state()
        print(f"bench.versus: {labels[OLD]} ({commit}, unpacked in {source}, imported from {seen}) against the "
              f"working tree ({tree}); sizes {sizes}, {args.rounds} round(s), interval {args.interval:g}s, "
              f"{args.intervals} measured intervals; logs under {results}", flush=True)
        for r, n, side in schedule(sizes, args.rounds):
            measured.append(_one(args, r, n, side, source, results / f"n{n}-r{r}-{side}"))
            if args.floor and sum(m.round == r and m.n == n for m in measured) == 2:
                floors.setdefault(n, {})[r] = ms = measure_floor(n)
                print(f"  [{n}] round {r} floor: {_num(ms, '.2f', ' ms')} per run", flush=True)
    finally:
        shutil.rmtree(source, ignore_errors=True)
    lines = [f"Daemon CPU per run: working tree against {labels[OLD]} ({commit}), interval {args.interval:g}s, "
             f"{args.intervals} intervals measured, checker {args.image} SIM_DELAY={args.delay:g}, "
             f"{os.cpu_count()} cores, {args.rounds} round(s) (old first in odd rounds, new first in even)", ""]
    for n in sizes:
        lines += [*size_table(measured, n, labels), *floor_lines(floors.get(n, {}), measured, n), ""]
    everything = [v for n in sizes for _, v in round_ratios(measured, n)]
    lines.append(f"Overall CPU per run new/old: {_ratio_txt(middle(everything))} (median of "
                 f"{sum(v is not None for v in everything)} round ratios); target <= {TARGET_RATIO}x")
    lines += ["", *sorted({f"- new: product {m.row['product']}" for m in measured
                           if m.side == NEW and "product" in m.row}),
              f"- logs and raw observations: {results}/n<N>-r<round>-<side>/"]
    text = "\n".join(lines)
    (results / "versus.md").write_text(text + "\n")
    print("\n" + text, flush=True)
    return 0 if any(figures(m.row) is not None for m in measured) else 2


if __name__ == "__main__":
    sys.exit(main())
