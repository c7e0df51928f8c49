"""The container runtime over CRI runtime.v1: client, protocols, messages and errors.

The only package that imports ``cri_protos`` and ``grpc``. Every CRI call is counted in the
kubelet's ``kubelet_runtime_operations_total``, ``..._duration_seconds`` and ``..._errors_total``
by the kubelet's ``operation_type`` (``operations.py``; ``remote.py`` says which answers count as
errors). Typical use::

    from nodeagent import kuberuntime

    async with await kuberuntime.connect("unix:///run/containerd/containerd.sock") as cri:
        ref = await cri.pull_image("localhost:5000/busybox:1.36")
        images = await cri.list_images()

The runtime manager (the kubelet's ``kuberuntime_manager``) runs each pod's sandbox and
containers as ``compute_pod_actions()`` plans them from the spec and the CRI state:

- the cgroup driver is learnt once per CRI connection from ``RuntimeConfig``, else from
  containerd's own configuration in a verbose ``Status``, else ``kubelet.cgroupDriver``
  (``cgroupdriver.py``);
- the sandbox is named by ``spec.hostname``/``subdomain``/``setHostnameAsFQDN``, or
  ``spec.hostnameOverride`` under the ``HostnameOverride`` gate, all checked as the kubelet's
  ``GeneratePodHostNameAndDomain`` (``dns.py``);
- init containers run one at a time, sidecars (init containers with ``restartPolicy: Always``)
  are kept running, then the app containers (started by ``containers.py``); lifecycle hooks
  (``hooks.py``) and termination messages (``termination.py``, read by ``messages.py``);
- before each container starts, once the pod has an IP (at once with ``hostNetwork``), the
  kubelet-managed ``<rootDir>/pods/<uid>/etc-hosts`` (``etchosts.py``: the kubelet's header,
  localhost lines, ``<podIP> <hostname>.<subdomain>.<ns>.svc.<clusterDomain> <hostname>``,
  ``hostAliases``; the node's own /etc/hosts under the host-network header for
  ``hostNetwork``) is rewritten in place and bind-mounted at /etc/hosts into every init,
  sidecar and app container that does not mount /etc/hosts itself (an unreadable node file or
  a bad name: ``CreateContainerConfigError``);
- ephemeral containers (``kubectl debug``, added by the ``ephemeralcontainers`` subresource and
  seen through the Pod watch) start once each, before the init containers and even while the
  pod initializes, are never restarted whatever their exit, never started on a terminating
  pod, and stop with the pod; ``targetContainerName`` becomes CRI ``pid: TARGET`` with
  ``target_id`` (a missing target: ``CreateContainerConfigError`` "unable to find target
  container X"; a field the apiserver refuses on one, such as a probe or ports:
  ``CreateContainerConfigError`` naming the field); their
  ``status.ephemeralContainerStatuses`` are never ready, without ``started``, never probed;
  they are found again after an agent restart by the kubelet's container labels;
- every stop goes through ``ContainerKiller.kill_container`` (``killing.py``): the
  ``Killing`` Event, preStop within the grace period, sidecars after the app containers in
  reverse order (``termination_order.py``), then ``StopContainer``;
- a container that has just exited from SIGKILL with the runtime's plain ``Error`` is read
  once more two seconds after its exit, since containerd may learn of the OOM kill after the
  exit (``oomreason.py``).
"""

from __future__ import annotations

from nodeagent.kuberuntime.endpoint import DEFAULT_ENDPOINT, RUNTIME_REQUEST_TIMEOUT
from nodeagent.kuberuntime.errors import (
    CriDeadlineExceeded,
    CriError,
    CriNotFound,
    CriUnavailable,
    CriUnimplemented,
    CriUnknown,
    CriVersionError,
    runtime_errors,
)
from nodeagent.kuberuntime.negotiate import connect, validate_v1
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.kuberuntime.service import ImageService, RuntimeService

__all__ = [
    "DEFAULT_ENDPOINT",
    "RUNTIME_REQUEST_TIMEOUT",
    "CriClient",
    "CriDeadlineExceeded",
    "CriError",
    "CriNotFound",
    "CriUnavailable",
    "CriUnimplemented",
    "CriUnknown",
    "CriVersionError",
    "ImageService",
    "RuntimeService",
    "connect",
    "runtime_errors",
    "validate_v1",
]
