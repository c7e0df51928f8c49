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

    ``path`` is the dotted field path as the user wrote it (``kubelet.maxPods``,
    ``kubelet.shutdownGracePeriodByPodPriority[1].priority``) or the flag (``--node-ip``);
    ``value`` the offending value as the user wrote it; ``message`` what is wrong and what is
    allowed. ``source`` is the file, ``line`` the line in it when known. ``summary`` replaces
    ``"path: message"`` when a whole sentence reads better (cross-field checks). ``more``
    holds the other problems found in the same pass; ``str()`` lists them all, one per line.
    """

    def __init__(
        self,
        path: str,
        message: str,
        value: object = None,
        *,
        source: str = "",
        line: int | None = None,
        summary: str = "",
        more: tuple[ConfigError, ...] = (),
    ) -> None:
        self.path = path
        self.value = value
        self.message = message
        self.source = source
        self.line = line
        self.summary = summary
        self.more = more
        super().__init__(self.__str__())

    @property
    def all(self) -> tuple[ConfigError, ...]:
        """This problem followed by the others found in the same pass."""
        return (self, *self.more)

    def _one(self) -> str:
        where = self.source
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        text = self.summary or (f"{self.path}: {self.message}" if self.path else self.message)
        return f"{where}: {text}" if where else text

    def __str__(self) -> str:
        return "\n".join(e._one() for e in self.all)


class ManagerCrashed(AgentError):
    """A manager's ``run()`` raised; the agent stops with a non-zero exit."""

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"manager {name!r} crashed: {type(cause).__name__}: {cause}")
