"""nodeagent: the node half of Kubernetes (kubelet + kube-proxy nftables) in one asyncio daemon."""

__version__ = "0.1.0"

__all__ = ["__version__"]
