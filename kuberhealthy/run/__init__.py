"""One run of one check: the phases of the checker pod's lifecycle (runner), the run's fixed facts
(context), the rules that decide when evidence is trusted (guard), settling the run on fresh reads and
removing its pod (ending), writing the result (finish), what the pod shows (podstate) and what a run
ends with (result)."""
