"""Node, pod and container resource usage: the Summary API and /metrics/resource."""
