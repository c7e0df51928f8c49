"""The volume manager: each pod's volumes set up before its containers start, torn down after
(``manager.py``); ``content/`` writes the files of API-sourced volumes.

Modules: ``manager.py``, ``layout.py`` (paths and the ``FailedMount`` text), ``hostpath.py``
(the ``type`` check), ``subpath.py``, ``ownership.py`` (``fsGroup``), ``mounter.py``
(``mount(8)``/``umount(8)``); for PersistentVolumes ``claims.py`` (claim -> bound PV, the
kubelet's words), ``affinity.py`` (a PV's ``nodeAffinity``), ``persistent.py`` (hostPath and
local PVs), ``claimed.py`` (set up once per pod, ``fsGroup``, republish, the resize check),
``expansion.py`` (online expansion, pure), ``pvstats.py`` (their Summary entries) and ``csi/``
(CSI drivers: registration, the CSINode, stage/publish; its own docstring).

In: each pod sync, before any container starts (the kubelet's ``WaitForAttachAndMount``),
the pod's ``spec.volumes``, node allocatable memory, ``/proc/self/mountinfo``, claims and
PersistentVolumes. Out:

- ``<rootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`` per volume: emptyDir on disk,
  or on tmpfs for ``medium: Memory``; secret and projected on tmpfs (each tmpfs sized by the
  smallest of the emptyDir's ``sizeLimit``, the pod's memory limit and node allocatable);
  configMap and downwardAPI on disk; the files of all four rewritten each sync by
  ``content/``; hostPath after its ``type`` check;
- ``fsGroup`` ownership (``OnRootMismatch`` honoured);
- CRI ``Mount``s per container: ``readonly``; propagation, a pod volume made a shared mount of
  its own for ``HostToContainer``/``Bidirectional``; subPath/subPathExpr checked so no path
  leaves the volume, then bind-mounted from an ``O_NOFOLLOW`` descriptor under
  ``volume-subpaths/``; SELinux relabel off;
- ``persistentVolumeClaim`` and generic ``ephemeral`` volumes: the bound PV's hostPath, a
  bind mount of a local PV (``kubernetes.io~local-volume/<pv>``), or a CSI volume staged on
  ``plugins/kubernetes.io/csi/<driver>/<sha>/globalmount`` and published on
  ``kubernetes.io~csi/<pv>/mount``; inline ``csi`` volumes published; a claim that is not bound
  keeps the pod waiting with the kubelet's log line (no Event, as the kubelet);
- a PV whose one access mode is ``ReadWriteOncePod`` set up for one pod of the node at a time:
  a second pod gets the kubelet's ``FailedMount`` text until the first one's volumes are
  torn down (``claimed.py``);
- a PV of ``volumeMode: Block`` mapped, not mounted: the pod's link to the device (a local
  PV's ``<podDir>/volumeDevices/kubernetes.io~local-volume/<pv>``; a CSI PV's
  ``<podDir>/volumeDevices/kubernetes.io~csi/<pv>``, to the file its driver published the
  device on, ``csi/volumes.py``) given to each container that names it in ``volumeDevices`` as
  a CRI ``Device`` (``mrw``, ``r`` for a read-only claim);
  a Block PV used through ``volumeMounts``, or a Filesystem one through ``volumeDevices``,
  fails with the kubelet's words;
- a volume that cannot be set up (or an unsupported source: image, nfs, a Block-mode PV
  other than local or CSI, ...)
  keeps the pod in ``ContainerCreating`` with a ``FailedMount`` Event (``MountVolume.SetUp
  failed for volume "x" : ...``, the PV's name for a claim), retried after 0.5 s doubling to
  2 m 2 s;
- after the pod's containers are gone its CSI volumes are unpublished (and unstaged when no
  pod uses them), then every mount below the pod dir is unmounted and the volumes removed
  (the whole dir once the pod has left the API), without following symlinks or crossing
  mounts; housekeeping does the same for pod dirs no pod owns (agent restart,
  ``kill -9`` mid-setup).
"""
