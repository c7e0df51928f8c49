"""The service proxy: kube-proxy's job in nftables mode, from the agent's watch caches.

:class:`~nodeagent.proxy.manager.ProxyManager` turns Services and EndpointSlices into one table
per IP family (``ip nodeagent``, ``ip6 nodeagent``) whose chains do not depend on the number of
Services (see :mod:`nodeagent.proxy.layout`); :mod:`nodeagent.proxy.cli` reads it back
(``nodeagent proxy services``, ``nodeagent proxy trace``).
"""
