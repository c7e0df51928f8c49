"""``nodeagent join``: a node joins a cluster the kubeadm way, with a bootstrap token.

``nodeagent join <apiserver> --token <id.secret> --discovery-token-ca-cert-hash sha256:<hex>``
is ``kubeadm join`` with token discovery, for an agent instead of a kubelet:

- :mod:`.token`: the token and the CA pins as the operator gives them (checked before any
  traffic; the secret never reaches a message);
- :mod:`.verify` (pure): the ``cluster-info`` ConfigMap trusted only once its JWS
  (``jws-kubeconfig-<token id>``, HS256 keyed with the token, detached payload) verifies and the
  CA's public key matches a pin;
- :mod:`.discovery`: kubeadm's two requests (TLS unverified, then verified against that CA),
  retried every 5 s up to the discovery timeout; the HTTP is
  :func:`nodeagent.apiserver.discovery.get_cluster_info`;
- :mod:`.kubeletconfig`: the cluster's kubelet configuration (``kube-system/kubelet-config``),
  read with the bootstrap token as kubeadm does, written beside the operator's file;
- :mod:`.files`: the bootstrap kubeconfig and ``<rootDir>/join-flags.env``, written only after
  every check passed;
- :mod:`.start`: kubeadm's "is a Ready Node of this name there already" check, the restart of
  ``nodeagent.service`` and the wait for TLS bootstrap (done by the agent's credentials
  manager, :mod:`nodeagent.certificate.manager`);
- :mod:`.cli`: the command and its options.

A one-shot command, never part of the daemon: it may import ``cryptography`` and joserfc.
"""
