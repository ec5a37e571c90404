"""One run of one check: the phases of the checker pod's lifecycle (runner), the rules that decide when
evidence is trusted (guard), the recording of the result (recording), what the pod shows (podstate)
and what a run ends with (result)."""
