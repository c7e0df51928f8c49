"""Graceful node shutdown through logind (the kubelet's ``nodeshutdown`` package).

``policy.py`` holds the pure rules (groups, budgets, strings, the drop-in and the state file
format), ``manager.py`` the manager, ``state.py`` the state file, ``cli.py`` the
``nodeagent shutdown plan`` command; logind is reached through :mod:`nodeagent.logind`
(dbus-fast). It runs in API and standalone mode.

In: ``shutdownGracePeriodByPodPriority`` (or ``shutdownGracePeriod``/
``shutdownGracePeriodCriticalPods``), logind over the system bus (``InhibitDelayMaxUSec``,
``PrepareForShutdown``), the pods' ``active_pods()``.

Out:

- at start: logind's limit below the groups' sum -> ``/etc/systemd/logind.conf.d/99-kubelet.conf``,
  SIGHUP through systemd's ``KillUnit``, re-read after 100 ms doubling, 5 times (then the
  kubelet's error text); a ``delay`` inhibitor lock (``shutdown``, ``kubelet``, "Kubelet needs
  time to handle node shutdown") held by its fd;
- on ``PrepareForShutdown(true)``: the Node Event ``NodeShutdown``; ``shutdown_in_progress()``
  (admission refuses new pods with ``NodeShutdown``; Ready=False "node is shutting down" through
  the node status's other errors, poked at once); pods killed group by group, lowest priority
  first, through their pod workers (``PodManagers.kill_pod``: ``ContainerKiller.kill_container``,
  preStop) with min(own grace, group budget) and the status Failed/``Terminated`` with
  ``DisruptionTarget``/``TerminationByKubelet``; a group over its budget is left behind
  ("Shutdown manager pod killing time out"); final statuses flushed (bounded);
  ``<rootDir>/graceful_node_shutdown_state`` written atomically;
  ``kubelet_graceful_shutdown_{start,end}_time_seconds``; the lock released;
- ``PrepareForShutdown(false)``: Ready again, a new lock;
- bus lost: restart after 1 s; no bus (no systemd): one error line, retried every 10 s, the
  agent runs on;
- ``nodeagent shutdown plan`` prints the groups, each pod's grace (a warning when cut) and the
  total against ``InhibitDelayMaxSec``.
"""
