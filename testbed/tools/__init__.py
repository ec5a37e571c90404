"""Third-party servers and tools the tests drive: a real InfluxDB and a fake one, helm."""
