"""Generated gRPC stubs of the CSI node side (``csi.v1`` Identity and Node services) and of
the kubelet's plugin registration API (``pluginregistration``), from the ``.proto`` files
beside them, which we wrote to match the wire of the CSI spec v1.9.0 and of
``k8s.io/kubelet/pkg/apis/pluginregistration/v1``. Imported only by ``nodeagent.csi``."""
