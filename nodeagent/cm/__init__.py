"""The container manager (the kubelet's ``pkg/kubelet/cm``): the QoS cgroup hierarchy, pod
cgroups, node allocatable on ``kubepods``, and the swap and OOM settings sent through CRI.

``policy`` holds the pure decisions (also used by ``kuberuntime.container``), ``cgroupfs``
and ``drivers`` the effects (cgroupfs directories, or systemd ``.slice`` units over D-Bus
through :mod:`nodeagent.systemd.dbus`), ``manager`` the
:class:`~nodeagent.cm.manager.ContainerManager`, ``host`` the host's facts, ``cli`` the
``nodeagent swap report`` command. On cgroup v2 only: on a v1 host, or with
``cgroupsPerQOS: false``, it does nothing (maintenance mode), except that on a v1 host with
``cgroupsPerQOS`` the empty ``pod<uid>`` cgroups runc made in each hierarchy are removed when
the pod is gone and at housekeeping (``v1pods``).

In: the cgroup driver the CRI connection learned, ``kubeReserved``/``systemReserved``/
``enforceNodeAllocatable``, ``podPidsLimit``, ``memorySwap.swapBehavior``,
``singleProcessOOMKill``, ``/proc/meminfo``, the agent's own cgroup (whether it has the swap
controller), each pod sync. Out:

- at start: ``kubepods`` (allocatable as ``memory.max``, ``cpu.weight`` from allocatable cpu),
  ``kubepods/burstable``, ``kubepods/besteffort`` (systemd: ``kubepods.slice``,
  ``kubepods-burstable.slice``, ``kubepods-besteffort.slice``);
- before a pod's sandbox: the Burstable weight (the sum of its pods' cpu requests; recomputed
  only when a pod's share changes, written only when its value does, so a resync of an
  unchanged pod computes and writes nothing) and the pod cgroup with
  ``cpu.weight``/``cpu.max``/``memory.max``/``pids.max`` as the kubelet's
  ``ResourceConfigForPod`` (from the pod's allocated resources; during an in-place resize first
  the larger of the old and new values, the new ones once the containers are resized); the pod
  cgroup removed when the pod terminated, and at housekeeping for pods no one owns;
- per container through CRI (``kuberuntime/container.py``): ``unified["memory.oom.group"]="1"``
  and ``unified["memory.swap.max"]`` (NoSwap 0; LimitedSwap request / memory x swap for
  Burstable non-critical pods whose request differs from the limit);
  ``<rootDir>/swap-state.json`` for ``nodeagent swap report``; ``failSwapOn`` refuses to
  start (``__main__``) with the kubelet's text;
- ``enforceNodeAllocatable`` ``system-reserved`` / ``kube-reserved`` (after the hierarchy, as
  the kubelet's ``enforceExistingCgroup``): the configured ``systemReservedCgroup`` /
  ``kubeReservedCgroup`` (systemd driver: parsed as a slice name, ``/system.slice`` ->
  ``["system"]``) must exist with the controllers its limits need, then gets the reservation's
  ``cpu.weight`` (cpu as shares), ``memory.max`` and ``pids.max`` (systemd: also the slice's
  ``CPUWeight``/``MemoryMax``/``TasksMax`` runtime properties) and a
  ``NodeAllocatableEnforced`` Node Event; otherwise a ``FailedNodeAllocatableEnforcement``
  Warning and the agent exits with the kubelet's "Failed to enforce System Reserved Cgroup
  Limits on ...";
- ``qosReserved: {memory: N%}`` (alpha gate ``QOSReserved``): ``kubepods/burstable``
  ``memory.max`` = allocatable - N% of the Guaranteed pods' memory requests,
  ``kubepods/besteffort`` that - N% of the Burstable pods' (the kubelet's
  ``setMemoryReserve``), updated on each pod add and remove.
"""
