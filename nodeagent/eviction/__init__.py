"""Node-pressure eviction (the kubelet's ``pkg/kubelet/eviction``): thresholds, observations,
node conditions, node-level reclaim, ranking and one eviction per pass.

:mod:`.thresholds` parses the configuration, :mod:`.policy` and :mod:`.localstorage` decide
(pure), :mod:`.manager` observes, reports and acts through injected callables (wired in
``agent.eviction_manager``).

In: the summary every 10 s (each pod's containers' ``rootfs``/``logs``, ``volume`` list and
``ephemeral-storage``), and at once when a 1 s poll of ``/proc/meminfo`` sees
``memory.available`` cross a memory threshold; the active pods from the pod workers with their
allocated resources (the allocation manager's view: a resize still ``PodResizePending``
changes neither rank nor message); ``evictionHard``/``evictionSoft``/
``evictionSoftGracePeriod``/``evictionMaxPodGracePeriod``/``evictionMinimumReclaim``/
``evictionPressureTransitionPeriod``; ``localStorageCapacityIsolation`` (default true); whether
the image fs is the root dir's (CRI ``ImageFsInfo``, asked once: the kubelet's
``HasDedicatedImageFs``).

Out:

- local ephemeral storage isolation first, every pass, with or without pressure (the kubelet's
  ``localStorageEviction``): every active pod with an ``emptyDir`` over its ``sizeLimit``
  ("Usage of EmptyDir volume "x" exceeds the limit "1Mi". "), else a pod
  ``ephemeral-storage`` over its containers' total ``limits.ephemeral-storage`` (``PodLimits``:
  sidecars summed, init containers' peak, overhead; "Pod ephemeral local storage usage exceeds
  the total limit of containers 5Mi. "), else a container whose logs and writable layer (logs
  only with a dedicated image fs) exceed its own limit ("Container app exceeded its local
  ephemeral storage limit "1Mi". ") is evicted in the same pass: grace 1 s,
  Failed/``Evicted``/message, the ``Evicted`` Event, no ``DisruptionTarget`` (the 1.36 kubelet
  passes none for these), critical pods spared;
- MemoryPressure/DiskPressure/PIDPressure for the node status (``pressure()``; a change pokes
  the status), the ``EvictionThresholdMet`` node Event, dead-container and unused-image GC before
  evicting for disk, then at most one pod per pass, ranked as the kubelet ranks (usage above
  request, priority, usage), killed through the pod workers with grace 1 s (hard thresholds)
  and a final status Failed/``Evicted``/message/``DisruptionTarget`` ``TerminationByKubelet``,
  with the ``Evicted`` pod Event;
- an admit handler in the sync loop refusing BestEffort pods under memory pressure and every pod
  under other pressure (``Evicted``, "The node had condition: [...]");
- PSI contention conditions (KEP-5394, alpha gate ``PSINodeCondition``, off by default):
  :mod:`.contention` (pure) and :mod:`.contention_monitor` (its own manager,
  ``psi-contention``) read, each housekeeping interval, the summary's ``full`` PSI of
  ``/proc/pressure/{memory,io}`` and the kubepods cgroup's ``memory``/``io.pressure``.
  ``SystemMemoryContentionPressure``, ``SystemDiskContentionPressure``,
  ``KubepodsMemoryContentionPressure`` and ``KubepodsDiskContentionPressure`` turn True when
  avg60 and avg10 reach their threshold (``systemMemoryContentionThreshold``, ...: PSI percent,
  default 0.9, 0 = off) and False when avg60 falls below it (``KubeletHas<Type>`` /
  ``KubeletHasNo<Type>``, ``NodeHas<Type>`` / ``NodeHasNo<Type>`` Events;
  ``ContentionPressureHigh`` when avg60 crosses, ``ContentionPressureTrendingLower`` when avg10
  falls back first); they reach the node status through ``Pressure.contention``, after Ready.
  The agent taints nothing and admits as before: the KEP leaves tainting to the node lifecycle
  controller.
"""

from __future__ import annotations

from nodeagent.eviction.manager import Eviction, EvictionManager, Terminator
from nodeagent.eviction.thresholds import Threshold, parse_thresholds

__all__ = ["Eviction", "EvictionManager", "Terminator", "Threshold", "parse_thresholds"]
