"""The host's resolver settings for the pods' DNS (the kubelet's ``dns.Configurer`` reading
``--resolv-conf``): parsed by :func:`nodeagent.kuberuntime.dns.parse_resolv_conf`, read off
the event loop and at most every 10 seconds. A file that cannot be read gives empty settings.
"""

from __future__ import annotations

import asyncio
from typing import Final

from nodeagent.kuberuntime.dns import parse_resolv_conf
from nodeagent.kuberuntime.podsettings import ResolvConf

RESOLV_CONF_TTL: Final = 10.0


class HostResolvConf:
    """The host's resolver settings, re-read at most every 10 seconds."""

    def __init__(self, *, path: str) -> None:
        self._path = path
        self._value: ResolvConf | None = None
        self._read_at = 0.0

    def _read(self) -> ResolvConf:
        try:
            with open(self._path) as f:
                return parse_resolv_conf(f.read())
        except OSError:
            return ResolvConf()

    async def __call__(self) -> ResolvConf:
        if not self._path:
            return ResolvConf()
        now = asyncio.get_running_loop().time()
        if self._value is None or now - self._read_at > RESOLV_CONF_TTL:
            self._value = await asyncio.to_thread(self._read)
            self._read_at = now
        return self._value
