"""Which checks run and when: leadership, the controller and its per-check workers, reapers.
Knows nothing about HTTP."""
