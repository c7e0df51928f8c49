"""Pod admission predicates, as the kubelet's pkg/kubelet/lifecycle: pure checks of whether a
pod bound to this node may run here (OS, features nodeagent lacks, sysctls, resource fit). Below
every manager, so eviction and allocation use them as the pod pipeline does."""
