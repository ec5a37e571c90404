"""`make attack`: hostile clients against a real daemon process on the test bed
(docs/interface.md#under-hostile-clients).

Each scenario module (slow.py, flood.py, crosssite.py, squat.py, events.py) exposes
`run(cluster, workdir) -> list[Row]`: it starts its own daemon process(es) on the shared test bed,
attacks, measures, stops what it started and returns one row per thing tried. The latency targets
live here, never in tests (tests assert each behaviour with generous bounds only).
"""
