"""`POST /externalCheckStatus`: a checker pod's report, from the body to the verdict on
its caller."""
