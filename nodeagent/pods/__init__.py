"""The pod pipeline, as the kubelet's pkg/kubelet core: sync loop, pod workers, PLEG and pod
sync. ``managers.pod_managers`` wires it. Pod QoS (``nodeagent.qos``) and the admission
predicates (``nodeagent.lifecycle``) live below every manager, as the kubelet's pkg/kubelet/qos
and pkg/kubelet/lifecycle.

What flows in:

- the Pod watch (``spec.nodeName``): each pod decoded and checked once per resourceVersion, an
  unreadable one gets a ``FailedValidation`` Event; merged with the static-pod file source
  (``staticPodPath``, every ``fileCheckFrequency``; each manifest bounded by
  :mod:`nodeagent.yamlshape` and parsed in a worker thread, a bad one logged and skipped);
- its own Service watch, every namespace: the containers' ``KUBERNETES_SERVICE_*`` and, with
  ``enableServiceLinks``, their namespace's ``*_SERVICE_*`` variables; before its first list a
  container is refused with ``CreateContainerConfigError`` "services have not yet been read at
  least once, cannot construct envvars", as the kubelet does;
- the PLEG relist every 1 s (``pleg.py``). Its last relist is the pods' runtime cache: a
  periodic sync of a pod whose sandboxes and containers the relist saw unchanged since the
  state was last read reuses that state, with no CRI request; any action of the agent on the
  pod drops it;
- ticks (the periodic resync and housekeeping) and probe results.

What flows out:

- ``compute_pod_actions()`` plans executed over CRI by the runtime manager (see
  :mod:`nodeagent.kuberuntime`: sandboxes, init, sidecar, app and ephemeral containers, hooks,
  ``/etc/hosts``, every stop through ``kill_container``);
- admission (the predicates in :mod:`nodeagent.lifecycle`) after the eviction manager's
  handler, as the kubelet orders them: a ``securityContext.sysctls`` entry outside the node's
  allowlist (:mod:`nodeagent.sysctl`: the safe sysctls of the running kernel plus
  ``kubelet.allowedUnsafeSysctls``, names or ``*`` prefixes of the IPC and net namespaces; a
  net or IPC one on a pod sharing the host's namespace) leaves the pod Failed
  ``SysctlForbidden`` "Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted"
  with the Warning Event, nothing started; the allowed ones go to the sandbox (CRI
  ``LinuxPodSandboxConfig.sysctls``, names in dotted form);
- the pod status, PATCHed only on change (a static pod's to its mirror pod) by
  :mod:`nodeagent.status`, as a strategic merge patch carrying only the agent's own conditions
  (merged by type, so conditions controllers write are never overwritten; a reason or message a
  condition no longer has is sent as null, so a Ready turning True drops the False's);
- ``spec.activeDeadlineSeconds`` (``deadline.py``, pure): from ``status.startTime``, the worker
  wakes when it falls (its own timer, so a lowered deadline acts at once), then the pod is
  Failed ``DeadlineExceeded`` "Pod was active on the node longer than the specified deadline"
  with the Normal Event and killed through its worker;
- ``spec.readinessGates``: Ready needs every gate's condition True (``ReadinessGatesNotReady``,
  the kubelet's messages); a status-only pod update whose Ready no longer matches its gates
  syncs the pod at once (the kubelet's ``HandlePodReconcile``);
- pod Events, and the final DELETE with ``gracePeriodSeconds: 0``.
"""
