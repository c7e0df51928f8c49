"""The pod pipeline, as the kubelet's pkg/kubelet core: sync loop, pod workers, PLEG, pod sync
and admission. ``managers.pod_managers`` wires it. Pod QoS lives below every manager, in
``nodeagent.qos``, as the kubelet's pkg/kubelet/qos."""
