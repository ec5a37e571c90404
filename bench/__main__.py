"""`make bench`: every benchmark, one after another. Each prints its own figures.

With `--against REF` (make bench BENCH_ARGS="--against REF ..."), bench.versus then compares the daemon's
CPU per run with that commit's; the other arguments go to it. Its exit status is this one's."""
import argparse
import runpy
import sys

from bench import versus

ap = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n\n")[0],
                             epilog="Arguments besides --against go to bench.versus (python -m bench.versus -h).")
ap.add_argument("--against", metavar="REF", help="then compare the daemon's CPU per run with this commit or tag")
known, rest = ap.parse_known_args()
if rest and not known.against:
    ap.error(f"{' '.join(rest)}: arguments besides --against go to bench.versus, so they need --against")

argv0 = sys.argv[0]
for module in ("bench.run_bench", "bench.web_bench", "bench.takeover_bench", "bench.cache_bench",
               "bench.dashboard_bench"):
    print(f"\n=== {module}", flush=True)
    sys.argv = [argv0]  # each parses the command line: it gets its defaults, not --against
    try:
        runpy.run_module(module, run_name="__main__")
    except ImportError as e:
        print(f"(skipped: {e})")
    except SystemExit:
        pass
if known.against:
    print("\n=== bench.versus", flush=True)
    sys.exit(versus.main(["--against", known.against, *rest]))
sys.exit(0)
