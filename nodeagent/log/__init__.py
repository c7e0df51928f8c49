"""Structured logging: journald-native under systemd, readable key=value lines elsewhere.

Usage::

    log = get_logger("nodelease").bind(node="n1")
    log.info("Lease renewed", duration_ms=3)
    log.v(4).info("Lease body", resource_version="123")   # only at -v 4 and above
    try: ...
    except OSError:
        log.exception("Cannot renew lease")                 # with the traceback

Keyword fields are the structure. Under systemd each becomes a journald field, upper-cased
(``pod_name`` -> ``POD_NAME``), so ``journalctl -u nodeagent POD_NAME=web-0`` works (see
:mod:`nodeagent.log.native`); elsewhere they are ``key=value`` pairs on a klog-style stderr line
(see :mod:`nodeagent.log.klog`). :func:`setup` chooses (see :mod:`nodeagent.log.routing`).

Verbosity follows the kubelet's ``-v``: ``log.v(n)`` logs when ``n <= verbosity``; ``v(0)``
and plain ``log.info()`` always log. The levels we use:

- 0: always on. Start and stop, registration, configuration, anything an operator must see.
- 2: state changes. Pod started/killed, condition flipped, lease recreated, rules resynced.
- 4: debug. Per-sync decisions, retries, computed plans. Also turns on ``log.debug()``.
- 6 and above: trace. Request and response bodies, per-item detail in big loops.

Warnings and errors do not depend on the verbosity.
"""

from nodeagent.log.facade import Logger, get_logger
from nodeagent.log.routing import Target, journal_stream_matches, reset, setup

__all__ = ["Logger", "Target", "get_logger", "journal_stream_matches", "reset", "setup"]
