"""`make bench`: every benchmark, one after another. Each prints its own figures."""
import runpy
import sys

for module in ("bench.run_bench", "bench.web_bench", "bench.takeover_bench", "bench.cache_bench",
               "bench.dashboard_bench"):
    print(f"\n=== {module}", flush=True)
    try:
        runpy.run_module(module, run_name="__main__")
    except ImportError as e:
        print(f"(skipped: {e})")
    except SystemExit:
        pass
sys.exit(0)
