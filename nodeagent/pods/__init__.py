"""The pod pipeline, as the kubelet's pkg/kubelet core: sync loop, pod workers, PLEG, pod sync,
admission and QoS. ``managers.pod_managers`` wires it; this package's ``__init__`` imports
nothing so that ``nodeagent.pods.qos`` stays usable from the runtime layer below the pipeline."""
