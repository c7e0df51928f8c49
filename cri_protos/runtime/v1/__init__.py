"""CRI runtime.v1: api.proto and its generated stubs (regenerate with cri_protos/generate.sh)."""
