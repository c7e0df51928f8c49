"""Node, pod and container resource usage: the Summary API and /metrics/resource.

Modules: ``node.py`` (``/proc`` and statvfs), ``cgroup.py``, ``housekeeping.py`` (the sampler),
``cgroupv1.py`` (pod cgroups of a v1 host),
``disk.py`` (volumes and logs on disk), ``summary.py`` (collection) with ``summary_json.py``
(the pure JSON builders), ``pressure.py`` (PSI for the contention monitor), ``resource.py``,
``cadvisor.py``, ``metrics.py``, ``http.py``, ``cli.py``.

In:

- CRI ``ListPodSandboxStats``/``ListContainerStats``/``ImageFsInfo``, the sandbox and container
  lists, ``/proc/stat``, ``/proc/meminfo``, ``/proc/loadavg``, statvfs of the root dir;
- on cgroup v2 the ``stats:cgroups`` sampler reads the root, kubepods and every pod and container
  cgroup (either driver's names) once per ``housekeepingInterval`` (10 s) in one worker-thread
  batch: ``cpu.stat``, ``memory.current``/``max``/``stat``, ``io.stat``, ``pids.current``/``max``,
  ``cpu``/``memory``/``io.pressure`` (opened relative to each cgroup's directory fd, read with
  ``os.read``), and ``/proc/pressure`` for the node. A pod or container cgroup's
  ``memory.max``/``pids.max`` are kept once two passes agree, read again every 6 passes and at
  once after the agent writes limits (cm, in-place resize); its unchanged
  ``cpu.stat``/``io.stat``/PSI texts are not parsed again; ``ListPodSandboxStats`` only for pods
  whose cgroup was not sampled;
- on cgroup v1 (cgroupfs driver, QoS cgroups) each summary reads every pod cgroup's
  ``cpuacct.usage`` and ``memory.{usage_in_bytes,limit_in_bytes,stat}`` (``cgroupv1.py``, one
  worker-thread batch) as cAdvisor does for the kubelet, and asks ``ListPodSandboxStats`` only
  for pods it did not find: containerd spends 1.35 s on that call with 100 pods;
- each listed pod's ``<rootDir>/pods/<uid>/volumes/*/*``, ``etc-hosts`` and pod log files
  (``disk.py``: du-like walks, one worker-thread batch at most every ``housekeepingInterval``
  and never more often than 5x the walk's own time; configMap/secret/downwardAPI/projected
  walked once, as the kubelet's ``CachedMetrics``; measured with 110 pods with a 10-file
  emptyDir each: 12-15 ms CPU a walk).

Out:

- ``/stats/summary``, the kubelet's JSON: each container's ``rootfs`` from CRI
  ``writable_layer`` and ``logs`` from its log directory; each pod's ``volume`` list and
  ``ephemeral-storage`` as ``calcEphemeralStorage`` sums them (writable layers and logs, disk
  emptyDirs and configMaps, ``etc-hosts``, pod log files; a volume on a file system of its own,
  such as a memory emptyDir, is not counted); on v2 pods and containers from their cgroups with
  ``psi`` on cpu/memory/io as in 1.36, ``process_stats``, the ``pods`` system container,
  ``rlimit``, ``runtime.imageFs``; on v1 containers from CRI, pods' CPU and memory from their
  cgroups;
- ``/metrics/resource``, and ``/metrics/cadvisor`` (cAdvisor's names and labels, PSI as
  ``container_pressure_*_{waiting,stalled}_seconds_total``);
- the same through ``nodeagent stats summary|cadvisor`` without the kubelet API;
- the summary the eviction manager reads;
- each pass's cost on ``/metrics``: ``nodeagent_stats_housekeeping_duration_seconds``,
  ``_cpu_seconds_total``, ``_cgroups``.
"""
