"""The pod pipeline, as the kubelet's pkg/kubelet core: sync loop, pod workers, PLEG and pod
sync. ``managers.pod_managers`` wires it. Pod QoS (``nodeagent.qos``) and the admission
predicates (``nodeagent.lifecycle``) live below every manager, as the kubelet's pkg/kubelet/qos
and pkg/kubelet/lifecycle."""
