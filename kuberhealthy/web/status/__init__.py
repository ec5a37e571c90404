"""`GET /` (the v2 status page) and `GET /metrics` (the v2 Prometheus families)."""
