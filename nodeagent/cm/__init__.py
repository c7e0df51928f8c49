"""The container manager (issue 14 part A): the QoS cgroup hierarchy, pod cgroups, node
allocatable on ``kubepods``, and the swap and OOM settings sent through CRI.

``policy`` holds the pure decisions (also used by ``kuberuntime.container``), ``cgroupfs``
and ``drivers`` the effects, ``manager`` the :class:`~nodeagent.cm.manager.ContainerManager`.
"""
