"""What leaves the process besides HTTP: Kubernetes Events, InfluxDB points, reports held
while the API server is away, the start-up schema check and the daemon's own counters."""
