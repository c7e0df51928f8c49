"""Pod admission predicates, as the kubelet's pkg/kubelet/lifecycle: pure checks of whether a
pod bound to this node may run here (OS, features nodeagent lacks, sysctls, resource fit,
then the general predicates: node affinity, node name, host ports, NoExecute taints). Below
every manager, so eviction and allocation use them as the pod pipeline does.

- ``admission``: ``admit_pod`` in the kubelet's order, with its reasons and messages;
- ``resources``: what a pod requests as ``NodeInfo`` counts it (component-helpers
  ``PodRequests``: init containers maxed, sidecars summed, overhead, scalar resources, the
  status's resources for a running pod);
- ``predicates``: node affinity and ``nodeSelector``, ``spec.nodeName``, host ports, taints,
  the ``kubernetes.io/os`` label and ``supplementalGroupsPolicy``.

Which pods count against a new one is the pod pipeline's (``pods.activepods``: the kubelet's
``GetActivePods``)."""
