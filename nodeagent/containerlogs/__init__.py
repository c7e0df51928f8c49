"""Container logs: the CRI log reader behind ``/containerLogs`` and the log rotation manager.

``cri`` parses the runtime's log format, ``reader`` reads one container's log across rotated
files (and follows it), ``service`` picks the container instance as the kubelet does, ``http``
is the aiohttp route, ``rotation`` is the kubelet's container log manager, ``nodelogs`` serves
``/logs/``.

In: CRI ``ContainerStatus`` (log path, state), the pod with the agent's newest status,
``containerLogMax*``. Out:

- ``/containerLogs/{ns}/{pod}/{container}`` on the kubelet API: rotated and gzipped files read
  in order; ``follow`` wakes on inotify through ``loop.add_reader`` (``watch``), no thread, and
  writes an appended line to the connection from that callback, with no task wake-up between;
- the rotation manager, every ``containerLogMonitorInterval``: rename, CRI
  ``ReopenContainerLog``, gzip all but the newest, keep ``containerLogMaxFiles``;
- ``/logs/``: the node's ``/var/log``, and ``?query=`` through journalctl behind
  ``enableSystemLogQuery``.
"""
