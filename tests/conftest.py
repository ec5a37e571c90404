"""The test bed's fixtures (cluster, namespace, kubelet, receiver, daemons, helm, influxd) and the autouse
thread-leak guard, from testbed/pytest_plugin.py."""
pytest_plugins = ["testbed.pytest_plugin"]
