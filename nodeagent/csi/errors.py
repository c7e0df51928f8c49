"""The error of a failed call to a CSI driver or a registering plugin.

::

    AgentError
    └── CsiError        a failed CSI or plugin registration call; carries rpc, code, details
"""

from __future__ import annotations

from nodeagent.errors import AgentError

FINAL_CODES = frozenset(
    {"Canceled", "DeadlineExceeded", "Unavailable", "ResourceExhausted", "Aborted"}
)
"""Codes after which the operation may still be going on in the driver (the kubelet's
``isFinalError`` is false for them: the volume is in an uncertain state)."""


class CsiError(AgentError):
    """A CSI call failed; ``str()`` is the gRPC status as Go prints it."""

    def __init__(self, *, rpc: str, code: str, details: str) -> None:
        self.rpc = rpc
        self.code = code
        self.details = details
        super().__init__(f"rpc error: code = {code} desc = {details}")

    @property
    def uncertain(self) -> bool:
        """The driver may have done it anyway (timeout, unavailable, ...)."""
        return self.code in FINAL_CODES
