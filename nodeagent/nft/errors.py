"""Errors of the nftables layer.

::

    NftError                 nft failed (the message carries nft's own error text)
    ├── NotFound             a table, chain, set, map, rule or element is missing (ENOENT)
    ├── Exists               ``create`` of something that exists, or a conflicting ``add`` (EEXIST)
    ├── Busy                 delete of a chain/set still referenced or not empty (EBUSY)
    └── InvalidTransaction   a transaction failed validation before it reached nft (latched)

The real runner and :class:`nodeagent.testing.fake_nft.FakeNFTables` raise the same classes, so
callers that branch on "not found" are testable.
"""

from __future__ import annotations

from nodeagent.errors import AgentError


class NftError(AgentError):
    """An nft transaction or listing failed; nothing of the transaction was applied."""


class NotFound(NftError):
    """The object named does not exist."""


class Exists(NftError):
    """The object exists already (``create``), or ``add`` conflicts with what exists."""


class Busy(NftError):
    """The object is still in use (a chain with rules or jumps to it, a set a rule looks up)."""


class InvalidTransaction(NftError):
    """The transaction was rejected before running: the first validation error, latched."""


def classify(stderr: str) -> type[NftError]:
    """The error class for nft's message (nft prints strerror text of the kernel's errno)."""
    if "No such file or directory" in stderr:
        return NotFound
    if "File exists" in stderr:
        return Exists
    if "Device or resource busy" in stderr:
        return Busy
    return NftError
