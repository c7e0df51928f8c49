"""The node's own registry credentials, as the kubelet's default keyring
(``credentialprovider.NewDefaultDockerKeyring``): the docker client's credential file found
on the node, tried after a pod's pull secrets and before the credential provider plugins.

The first ``config.json`` that reads as one (``{"auths": {...}}``) in, in order, the root dir
(``node.rootDir``, the kubelet's ``SetPreferredDockercfgPath``), the working directory,
``$HOME/.docker`` and ``/.docker``; if none does, the first ``.dockercfg`` (the bare map) in the
root dir, the working directory, ``$HOME`` and ``/``. A file that is missing or does not decode
is passed over (said at ``-v=4``, never with its content). What was found is kept 5 minutes
(an empty answer too), then the files are read again. An image pulled with these credentials
serves every pod of the node, as one pulled without any (the pull records'
``nodePodsAccessible``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Final

from nodeagent.credentialprovider.dockerconfig import (
    DockerConfig,
    DockerConfigError,
    loads,
    parse_dockercfg,
    parse_dockerconfigjson,
)
from nodeagent.credentialprovider.keyring import Keyring, TrackedAuthConfig
from nodeagent.log import Logger, get_logger

CACHE_LIFETIME: Final = 5 * 60.0
MAX_FILE: Final = 10 << 20  # the kubelet's maxReadLength
CONFIG_JSON: Final = "config.json"
DOCKERCFG: Final = ".dockercfg"


def search_paths(root_dir: str, *, cwd: str, home: str) -> tuple[list[str], list[str]]:
    """Where ``config.json`` and then ``.dockercfg`` are looked for, in order."""
    json_dirs = [root_dir, cwd, os.path.join(home, ".docker"), "/.docker"]
    cfg_dirs = [root_dir, cwd, home, "/"]
    return (
        [os.path.abspath(os.path.join(d, CONFIG_JSON)) for d in json_dirs],
        [os.path.abspath(os.path.join(d, DOCKERCFG)) for d in cfg_dirs],
    )


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise DockerConfigError(f"larger than {MAX_FILE} bytes")
    return data


def read_node_config(
    root_dir: str, *, cwd: str, home: str, log: Logger | None = None
) -> DockerConfig | None:
    """The credentials of the first credential file that reads as one; None if none does
    (blocking: the caller runs it in a thread)."""
    log = log or get_logger("credentialprovider")
    json_paths, cfg_paths = search_paths(root_dir, cwd=cwd, home=home)
    for paths, parse, kind in (
        (json_paths, parse_dockerconfigjson, CONFIG_JSON),
        (cfg_paths, parse_dockercfg, DOCKERCFG),
    ):
        for path in paths:
            log.v(4).info(f"looking for {kind}", path=path)
            try:
                config = parse(loads(_read(path)))
            except FileNotFoundError:
                continue
            except (OSError, DockerConfigError) as e:
                text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                log.v(4).info(f"while trying to read {kind}", path=path, error=text)
                continue
            log.v(4).info(f"found valid {kind}", path=path)
            return config
    return None


class NodeKeyring:
    """The node's credential file as a keyring, read again every 5 minutes."""

    def __init__(
        self,
        *,
        root_dir: str,
        monotonic: Callable[[], float],
        environ: Mapping[str, str] | None = None,
        cwd: Callable[[], str] = os.getcwd,
        lifetime: float = CACHE_LIFETIME,
        log: Logger | None = None,
    ) -> None:
        self._root_dir = root_dir
        self._monotonic = monotonic
        self._environ = os.environ if environ is None else environ
        self._cwd = cwd
        self._lifetime = lifetime
        self._log = log or get_logger("credentialprovider")
        self._keyring: Keyring | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()
        self.reads = 0
        """How many times the files were searched (for tests)."""

    async def _current(self) -> Keyring:
        async with self._lock:  # one search for concurrent lookups
            if self._keyring is not None and self._monotonic() < self._expires:
                return self._keyring
            self._log.v(2).info("Refreshing cache for provider: defaultDockerConfigProvider")
            self.reads += 1
            config = await asyncio.to_thread(
                read_node_config,
                self._root_dir,
                cwd=self._cwd(),
                home=self._environ.get("HOME", ""),
                log=self._log,
            )
            if config is None:
                self._log.v(2).info(
                    "Docker config file not found: couldn't find valid .dockercfg",
                    root_dir=self._root_dir,
                )
            keyring = Keyring()
            keyring.add(None, config or {})
            self._keyring = keyring
            self._expires = self._monotonic() + self._lifetime
            return keyring

    async def lookup(self, image: str) -> list[TrackedAuthConfig]:
        """Every node credential for ``image`` (a repository), most specific first."""
        return (await self._current()).lookup(image)
