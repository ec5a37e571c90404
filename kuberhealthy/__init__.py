"""Kuberhealthy (Python): synthetic health checks for Kubernetes, wire-compatible with Kuberhealthy v2."""

__version__ = "0.1.0"
