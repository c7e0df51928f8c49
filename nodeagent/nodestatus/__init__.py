"""Node registration and status: setters (pure), the status manager, and the inspection file.

In: host facts (``facts.py``), the runtime's status, the node watch cache, the pressure and
image lists of other managers. Out: the Node registered (``registration.py``), its status
computed by the setters (``setters.py``, ``compute.py``, with ``status.declaredFeatures``: what
the node serves end to end) and PATCHed on change or every 5 m (``manager.py``), the
transitions' Events, and ``<rootDir>/node-state.json`` (``report.py``) for ``nodeagent status``
(``cli.py``).
"""
