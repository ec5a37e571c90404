"""One run of one check: the phases of the checker pod's lifecycle, the rules that decide when
evidence is trusted, and the recording of the result."""
