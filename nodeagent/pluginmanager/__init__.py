"""The plugin manager: plugins that register with the node through sockets in
``<rootDir>/plugins_registry`` (the kubelet's ``pluginmanager``: plugin watcher, desired and
actual state, reconciler), such as a CSI driver's node-driver-registrar.

Modules: ``watcher.py`` (the directory's sockets, and what to register and deregister: pure),
``manager.py`` (:class:`PluginManager`: every second, new or replaced sockets are asked
``GetInfo``; the handler of the plugin's ``type`` validates and registers it; the plugin hears
the outcome through ``NotifyRegistrationStatus``; a socket that went away, or was replaced,
deregisters its plugin). In: the directory. Out: the handlers' calls (the CSI handler is
``volumemanager.csi``'s).
"""

from nodeagent.pluginmanager.manager import PluginHandler, PluginManager
from nodeagent.pluginmanager.watcher import REGISTRY_DIR, Socket

__all__ = ["REGISTRY_DIR", "PluginHandler", "PluginManager", "Socket"]
