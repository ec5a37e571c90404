"""`POST /externalCheckStatus` and `POST /check`: a checker pod's report. The route (routes.py) decodes the body
(body.py), asks the admission once whose run it is and whether it may be stored (admission.py: the
token review in tokens.py, the triage in triage.py, the report slot, the caller rules in caller.py
over finder.py), stores what is accepted and counts every answer (stats.py)."""
