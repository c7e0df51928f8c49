"""Container logs: the CRI log reader behind ``/containerLogs`` and the log rotation manager.

``cri`` parses the runtime's log format, ``reader`` reads one container's log across rotated
files (and follows it), ``service`` picks the container instance as the kubelet does, ``http``
is the aiohttp route, ``rotation`` is the kubelet's container log manager.
"""
