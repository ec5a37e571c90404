"""`make demo`, `make demo-node` and `make screenshots`."""
