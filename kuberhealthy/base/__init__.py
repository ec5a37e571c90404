"""The ground floor: settings, our error types, Go durations and RFC 3339 times, change
notification and the thread base. Imports nothing of the package above it."""
