"""The logind and systemd D-Bus client (system bus, dbus-fast).

:class:`Logind` is what the node shutdown manager needs from the host: logind's
``InhibitDelayMaxUSec``, a ``delay`` inhibitor lock (its file descriptor), logind reloaded
through systemd's ``KillUnit`` (SIGHUP), and the ``PrepareForShutdown`` signal. The fake for
tests is ``nodeagent.testing.fake_logind``.
"""

from nodeagent.logind.client import (
    BusGone,
    DbusLogind,
    Logind,
    LogindError,
)

__all__ = ["BusGone", "DbusLogind", "Logind", "LogindError"]
