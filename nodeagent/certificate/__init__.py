"""The node's client certificate: TLS bootstrap through a CSR, storage, and rotation.

In: the bootstrap kubeconfig and the clock. Out: the client certificate and a kubeconfig under
the root dir (``store.py``), renewed through a new CSR before expiry, and the API client's
credentials swapped live (``manager.py``). Keys, CSRs and the self-signed serving pair are made
by ``cryptography`` in a child process (``isolated.py``); certificates are read with the
standard library (``der.py``), so the agent never loads ``cryptography`` (-13 MiB of RSS
measured with 30 pods, docs/benchmarks.md).
"""
