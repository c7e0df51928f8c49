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

Topology: endpoints hinted for this node (``hints.forNodes``) or its zone (``hints.forZones``,
the Node's ``topology.kubernetes.io/zone`` label; a change of it means a full sync) narrow the
cluster endpoints as kube-proxy's ``CategorizeEndpoints`` does (:mod:`.policy`).

kube-proxy's own endpoints: :mod:`.health` and :mod:`.healthserver` serve ``/healthz`` and
``/livez`` on ``proxy.healthzBindAddress`` (0.0.0.0:10256; 503 when a queued change waited
over twice ``syncPeriod``, ``/healthz`` also while the Node is deleted or tainted
``ToBeDeletedByClusterAutoscaler``) and each LoadBalancer Service's ``healthCheckNodePort``
(``externalTrafficPolicy: Local``) on the NodePort addresses: 200 with ready endpoints on this
node, else 503, with kube-proxy's JSON; a port that cannot be bound gives the Service a
Warning Event ``FailedToStartServiceHealthcheck``. As kube-proxy's proxier per family, each
family has its own checks (on its NodePort addresses, else ``0.0.0.0`` or ``::``), counting
that family's endpoints, opened and failing on their own. :mod:`.metricsserver` serves the
``kubeproxy_*`` metrics (:mod:`.metrics`) on ``proxy.metricsBindAddress`` (127.0.0.1:10249) as
kube-proxy does, apart from the kubelet's ``/metrics``, including the conntrack reconciler's
(``kubeproxy_conntrack_reconciler_sync_duration_seconds``, ``..._deleted_entries_total``).

Events: :mod:`.recorder` posts kube-proxy's ``events.k8s.io/v1`` Events (reporting
controller ``kube-proxy``, instance ``kube-proxy-<hostname>``), apart from the kubelet's
``core/v1`` recorder (:mod:`nodeagent.events`).
"""
