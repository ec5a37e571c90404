"""The process: the gunicorn application and its signals (server), the daemon inside the worker
(runtime), the composition root that builds and wires every part (services), and live reload of the
config file (configwatch notices a change, reconfigure applies it)."""
