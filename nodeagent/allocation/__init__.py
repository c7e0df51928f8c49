"""In-place pod resize (InPlacePodVerticalScaling): allocations, their checkpoint, the resize
admission and the ``PodResizePending``/``PodResizeInProgress`` conditions.

``policy.py`` holds the pure decisions, ``manager.py`` the kubelet's allocation manager; the
pod sync applies a resize (:mod:`nodeagent.pods.resize`). In: each pod sync (the spec's
container and sidecar resources), node allocatable, the other active pods' allocations,
``memorySwap``, ``<rootDir>/allocated_pods_state``. Out:

- the resources a pod was admitted with are checkpointed (JSON, atomic) and everything that
  runs uses them;
- a changed spec (``kubectl patch --subresource resize``) is judged as the kubelet's
  ``handlePodResourcesResize``: ``Infeasible`` ("In-place resize of static-pods is not
  supported", "In-place resize of containers with swap is not supported.", "Node didn't have
  enough capacity: cpu, requested: 64000, capacity: 2000") or ``Deferred`` (the admission
  predicate's "Node didn't have enough resource: ..."; looked at again every 30 s) in
  ``PodResizePending`` with ``observedGeneration`` and ``ResizeInfeasible``/``ResizeDeferred``
  Events; accepted: a new checkpoint, ``PodResizeInProgress``, ``ResizeStarted``;
- applying (``pods.resize.PodResizer``, the kubelet's ``doPodResizeAction`` order): the pod cgroup
  widened to the larger of old and new limits (``cm.policy.widen``); a pod memory limit below
  the pod's ``memory.current`` refused ("aborting attempt to set pod memory limit less than
  current memory usage for pod x", ``PodResizeInProgress`` ``Error``, ``ResizeError``); each
  running container updated by CRI ``UpdateContainerResources`` with the values
  ``container.linux_resources`` computes at create (memory shrinks first);
  ``resizePolicy: RestartContainer`` restarts it instead ("Container app resize requires
  restart"; a sidecar is killed and started again through the init-container plan, the app
  containers kept running); then the pod cgroup's new limits; done when the runtime reads the
  new values back: ``ResizeCompleted``;
- ``status.containerStatuses[].allocatedResources`` and ``.resources`` on every sync (and
  ``initContainerStatuses[]`` for sidecars);
- the eviction manager ranks and describes pods with their allocations
  (``PodManagers.allocated_pods``, the kubelet's ``getAllocatedPods``).
"""

from nodeagent.allocation.manager import AllocationManager

__all__ = ["AllocationManager"]
