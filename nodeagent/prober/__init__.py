"""The prober manager: liveness, readiness and startup probes, as the kubelet's ``prober``.

Modules: ``manager.py`` (workers and results), ``prober.py`` (dispatch), ``kinds.py`` (exec,
tcp), ``http.py``, ``sockio.py`` (plain TCP without asyncio's transports), ``grpchealth.py``.
In: pods from the pod sync (``add_pod``, stopped at termination), their last generated status
(container IDs, states, pod IP), CRI ``ExecSync``, TCP/HTTP(S)/gRPC to the pod IP. Out:

- one asyncio task per (pod, container, probe type) with the kubelet's timing and thresholds;
  results keyed by container ID;
- a changed result is a ``ProbeResult`` sync event; a readiness result goes on the pod's last
  status at once (``readiness_results`` -> ``status.with_container_readiness``, the kubelet's
  ``SetContainerReadiness``): a terminating pod's worker is busy killing it for its whole grace
  period while its readiness probes still run; its liveness and startup probes are stopped
  then;
- status generation asks it for ``started``/``ready`` (so ``Ready``/``ContainersReady``);
  ``compute_pod_actions`` kills a container whose liveness or startup probe failed
  (``Killing`` "... failed liveness probe, will be restarted", the probe-level grace);
- ``Unhealthy``/``ProbeWarning`` Events; ``prober_probe_total``;
- sidecars (init containers with ``restartPolicy: Always``) are probed too: their ``ready`` in
  ``initContainerStatuses``, their startup result (``startup_results``) holding the next init
  container back, a failed liveness restarting them ("Init container x failed liveness
  probe"); probes on plain init containers are refused at admission (``ProbesNotSupported``).
"""

from nodeagent.prober.manager import NoProbes, PodProbes, ProberManager
from nodeagent.prober.prober import ProbeIO, ProbeType

__all__ = ["NoProbes", "PodProbes", "ProbeIO", "ProbeType", "ProberManager"]
