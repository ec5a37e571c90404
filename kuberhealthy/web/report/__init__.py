"""`POST /externalCheckStatus`: a checker pod's report. The route (routes.py) decodes the body
(body.py), asks the caller rules once for a verdict on who sent it (caller.py; tokens.py verifies
ServiceAccount tokens), stores what is accepted and counts every answer (stats.py)."""
