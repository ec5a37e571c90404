"""The local test bed: a real kube-apiserver + etcd on loopback, a simulated kubelet, and the tools around them.

Tests (tests/), benchmarks (bench/) and the demo (`python -m testbed.demo`) share it; the product never
imports it, and nothing here imports tests/. Its rooms (testbed/README.md says more):

- cluster/: the API server and etcd (with fault controls), the chart's CRDs, objects made through the API
  and their bodies, loopback addresses and ports, a watch of checker pods from outside
- sim/: the simulated kubelet (binds pods, plays a behaviour per image, reports over real HTTP)
- daemons/: the daemon as users run it (process.py) and wired in this process (inprocess.py)
- clients/: raw HTTP and report posting, readers of the product's wire formats, forged tokens, chromium
- fakes/: in-memory fakes of the product's seams, for unit tests (they import `kuberhealthy`)
- tools/: third-party servers and tools: a real and a fake InfluxDB, helm
- faults/: fault scenarios measured from outside the product: the fault bed, observers, a silent proxy,
  the verdict
- node/: the real single node and the end-to-end test bed on it, with its images
- demo/: `make demo`, `make demo-node`, `make screenshots`
- the kit, at the top: paths, wait (the polling helper), procs (ending child processes), stats
  (percentiles, CPU seconds), budget and terminal (time budgets and progress lines), modgraph (the
  product's import graph), pytest_plugin (the fixtures; tests/conftest.py registers it)

The release pipeline is not here: it lives in release/ at the top of the repository.
"""
