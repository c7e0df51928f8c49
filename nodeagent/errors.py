"""The one error tree of nodeagent.

Every error the agent raises on purpose derives from :class:`AgentError`::

    AgentError
    ├── ConfigError            bad configuration file or flag (names the field path and value)
    ├── ManagerCrashed         a manager's run() raised; carries the manager name
    ├── ApiError               kube-apiserver (NotFound, Conflict, Forbidden, Gone, ...)   [planned]
    ├── CriError               container runtime over CRI                                [planned]
    ├── LogindError            logind over D-Bus                                         [planned]
    ├── NftError               nftables transactions (NotFound, Exists)                  [planned]
    └── CgroupError            cgroupfs and PSI files                                    [planned]

Low-level exceptions are wrapped with what failed (file path, RPC name, D-Bus property) and
chained with ``raise ... from ...``.
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of every error nodeagent raises on purpose."""


class ConfigError(AgentError):
    """Invalid configuration.

    ``path`` is the dotted field path (``kubelet.maxPods``), ``value`` the offending value
    as the user wrote it, ``message`` what is allowed. ``str()`` gives the whole sentence.
    """

    def __init__(self, path: str, message: str, value: object = None, *, source: str = "") -> None:
        self.path = path
        self.value = value
        self.message = message
        self.source = source
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.path}: {self.message}"


class ManagerCrashed(AgentError):
    """A manager's ``run()`` raised; the agent stops with a non-zero exit."""

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"manager {name!r} crashed: {type(cause).__name__}: {cause}")
