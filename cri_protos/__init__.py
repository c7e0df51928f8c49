"""Protocol definitions spoken by nodeagent (generated stubs live under runtime/v1)."""
