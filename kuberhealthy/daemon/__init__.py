"""The process: the gunicorn application and its signals, the composition root that builds
and wires every part, and live reload of the config file."""
