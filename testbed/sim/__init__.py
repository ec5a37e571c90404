"""A simulated kubelet for integration tests: binds pods to fake nodes and plays a behaviour per image.

See testbed/sim/README.md for the behaviour table. Nothing here is imported by the product.
"""
from testbed.sim.kubelet import SimKubelet
from testbed.sim.records import PodRecord, ReportResult

__all__ = ["PodRecord", "ReportResult", "SimKubelet"]
