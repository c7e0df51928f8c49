"""The node's clients of CSI drivers and of the plugins that register with it.

``client.py``: the CSI ``Identity`` and ``Node`` services of one driver over its unix socket
(``grpc.aio``, a deadline per call: the kubelet's ``csiTimeout`` of 2 min, 1 min for stats),
answers as the frozen types of ``types.py``; ``registration.py``: the kubelet's
``pluginregistration`` API a plugin serves on its socket in ``<rootDir>/plugins_registry``
(``GetInfo``, ``NotifyRegistrationStatus``). Failures are :class:`CsiError` with the gRPC
status as Go prints it (``rpc error: code = Internal desc = ...``). The stubs are
``csi_protos``' (our ``.proto`` files of the CSI spec v1.9.0 wire), imported only here.
"""

from nodeagent.csi.client import CsiNodeClient
from nodeagent.csi.errors import CsiError
from nodeagent.csi.interface import CsiNode, CsiNodeFactory, PluginRegistrar
from nodeagent.csi.registration import RegistrationClient
from nodeagent.csi.types import (
    AccessMode,
    NodeCapabilities,
    NodeInfo,
    PluginInfo,
    PublishRequest,
    StageRequest,
    VolumeStats,
)

__all__ = [
    "AccessMode",
    "CsiError",
    "CsiNode",
    "CsiNodeClient",
    "CsiNodeFactory",
    "NodeCapabilities",
    "NodeInfo",
    "PluginInfo",
    "PluginRegistrar",
    "PublishRequest",
    "RegistrationClient",
    "StageRequest",
    "VolumeStats",
]
