"""The resources and their rules: the check spec, the checker pod, the khstate record and its
history, the run-now annotation. Pure where it can be; writes go through kube/."""
