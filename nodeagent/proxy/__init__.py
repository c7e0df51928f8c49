"""The service proxy: kube-proxy's job in nftables mode, from the agent's watch caches.

:class:`~nodeagent.proxy.manager.ProxyManager` turns Services and EndpointSlices into one table
per IP family (``ip nodeagent``, ``ip6 nodeagent``) whose chains do not depend on the number of
Services (see :mod:`nodeagent.proxy.layout`); :mod:`nodeagent.proxy.cli` reads it back
(``nodeagent proxy services``, ``nodeagent proxy trace``).

:mod:`.service` wires it (``proxy.enabled``, default true), once the node's InternalIPs are
known (``--node-ip`` or the node's status). In: ``cache:services`` and
``cache:endpointslices`` in every namespace with kube-proxy's selectors (no Service labelled
``service.kubernetes.io/service-proxy-name`` or headless, no EndpointSlice labelled
``service.kubernetes.io/headless``; the pods' Service variables use their own unfiltered
cache), and the Node's addresses. Out: one ``nft -f`` transaction per sync into
``ip nodeagent`` / ``ip6 nodeagent`` (:mod:`.family`, driven by :mod:`.manager`); an invalid
Service or EndpointSlice is skipped with one log line (:mod:`.validation`); a partial sync also
deletes the shape chains no service port uses any more; ``conntrack -D`` for stale UDP flows.
The rules stay in the kernel when the agent stops.
"""
