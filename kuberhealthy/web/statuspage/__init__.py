"""`GET /status`: the read-only status page for people outside the team (statusPage.enabled; 404 while off).

Checks grouped by their label `kuberhealthy.io/status-group`, each group and check with its state now in
words and its last 30 days as a bar; no run-now, no logs, no error texts unless statusPage.showErrors.
board.py arranges the JSON API's entries into groups (pure), page.py keeps the page's prepared bytes,
routes.py serves them.
"""
