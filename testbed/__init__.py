"""The local test bed: a real kube-apiserver + etcd on loopback, a simulated kubelet, and the tools around them.

Tests (tests/), benchmarks (bench/) and the demo (`python -m testbed.demo`) share it; the product never
imports it, and nothing here imports tests/. What lives where:

- cluster.py, crds.py: start/stop the API server and etcd (with fault controls), install the chart's CRDs
- sim/: the simulated kubelet (binds pods, plays a behaviour per image, reports over real HTTP)
- daemon.py: the daemon as users run it, the `kuberhealthy` console script in a child process
- inprocess.py: the daemon wired in this process (the one module here that imports `kuberhealthy`)
- builders.py, objects.py, loopback.py, rawhttp.py, formats.py: resource bodies, objects made through the
  API, loopback addresses and ports, raw HTTP and report posting, readers of the product's wire formats
- faults.py, observe.py, tcpproxy.py, verdict.py: fault scenarios measured from outside the product
- influxd.py, fakeinflux.py, helm.py, podmonitor.py, wait.py, procs.py, paths.py: a real and a fake
  InfluxDB, helm, a pod watch, the polling helper, ending child processes, the repository's paths
- modgraph.py: the product's import graph (for tests/unit/test_architecture.py and the docs)
- pytest_plugin.py: the fixtures (tests/conftest.py registers it with `pytest_plugins`)
"""
