"""CRI: the Kubernetes Container Runtime Interface."""
