"""The node's client certificate: TLS bootstrap through a CSR, storage, and rotation."""
