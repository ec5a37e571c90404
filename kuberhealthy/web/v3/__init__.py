"""The room of Kuberhealthy v3's routes: `/json`, `/api/run`, `/api/events`, `/api/logs`,
`/api/logs/stream` (routes.py), for every kind of check (web/checkkinds.py)."""
