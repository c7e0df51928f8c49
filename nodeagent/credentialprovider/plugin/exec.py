"""One run of an exec credential provider plugin, as the kubelet's ``execPlugin``.

``$ ENV=VALUE <binDir>/<name> args... < CredentialProviderRequest > CredentialProviderResponse``

The plugin gets the agent's environment plus the configured ``env``, the request as JSON on
stdin (``image``, and in the service-account token mode ``serviceAccountToken`` and
``serviceAccountAnnotations``), and must print a response of the same ``apiVersion`` on
stdout. A run is bounded: 1 minute (the kubelet's catch-all timeout), then the plugin's whole
process group is killed; at most 1 MiB of stdout and 64 KiB of stderr are read. Errors say
what went wrong with the plugin's name and image, and quote the plugin's stderr (cut short),
never its stdout, which may hold credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from nodeagent import gotext
from nodeagent.credentialprovider.dockerconfig import DockerConfigEntry
from nodeagent.credentialprovider.plugin.types import ProviderConfig
from nodeagent.errors import AgentError

PLUGIN_TIMEOUT: Final = 60.0
MAX_STDOUT: Final = 1 << 20
MAX_STDERR: Final = 64 << 10
SHOWN_STDERR: Final = 512
CACHE_KEY_TYPES: Final = ("Image", "Registry", "Global")


class PluginError(AgentError):
    """A plugin run that gave no usable response."""


@dataclass(frozen=True, slots=True)
class PluginResponse:
    cache_key_type: str
    cache_duration: float | None
    auth: Mapping[str, DockerConfigEntry] = field(default_factory=dict, repr=False)


def encode_request(
    api_version: str, image: str, token: str = "", annotations: Mapping[str, str] | None = None
) -> bytes:
    request: dict[str, object] = {
        "kind": "CredentialProviderRequest",
        "apiVersion": api_version,
        "image": image,
    }
    if token:
        request["serviceAccountToken"] = token
    if annotations:
        request["serviceAccountAnnotations"] = dict(annotations)
    return json.dumps(request).encode()


def decode_response(data: bytes, api_version: str) -> PluginResponse:
    """The plugin's stdout -> its response; ``PluginError`` (never quoting ``data``) else."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise PluginError("error reading GVK from response: not a JSON object") from None
    if not isinstance(doc, dict):
        raise PluginError("error reading GVK from response: not a JSON object")
    actual = doc.get("apiVersion")
    if actual != api_version:
        raise PluginError(
            "apiVersion from credential plugin response did not match expected apiVersion:"
            f"{api_version}, actual apiVersion:{str(actual)[:100]}"
        )
    try:
        if doc.get("kind") != "CredentialProviderResponse":
            raise ValueError("kind")
        cache_key_type = doc.get("cacheKeyType", "")
        if not isinstance(cache_key_type, str):
            raise ValueError("cacheKeyType")
        raw_duration = doc.get("cacheDuration")
        duration = None
        if raw_duration is not None:
            if not isinstance(raw_duration, str):
                raise ValueError("cacheDuration")
            duration = gotext.parse_duration(raw_duration) / gotext.SECOND
        auth: dict[str, DockerConfigEntry] = {}
        for match, entry in (doc.get("auth") or {}).items():
            if not isinstance(entry, dict):
                raise ValueError("auth")
            username, password = entry.get("username", ""), entry.get("password", "")
            if not isinstance(username, str) or not isinstance(password, str):
                raise ValueError("auth")
            auth[str(match)] = DockerConfigEntry(username=username, password=password)
    except (ValueError, AttributeError, TypeError):
        # Not wrapped: the decoding error could quote the credentials of the response.
        raise PluginError(
            "error decoding credential provider plugin response from stdout"
        ) from None
    if cache_key_type not in CACHE_KEY_TYPES:
        raise PluginError(
            f"credential provider plugin did not return a valid cacheKeyType: {cache_key_type[:40]}"
        )
    return PluginResponse(cache_key_type=cache_key_type, cache_duration=duration, auth=auth)


async def _read(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of ``stream``, and whether there was more (drained)."""
    if stream is None:
        return b"", False
    data = bytearray()
    over = False
    while chunk := await stream.read(65536):
        room = max(limit - len(data), 0)
        over = over or len(chunk) > room
        data += chunk[:room]
    return bytes(data), over


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_plugin(
    provider: ProviderConfig,
    *,
    image: str,
    token: str = "",
    annotations: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = PLUGIN_TIMEOUT,  # noqa: ASYNC109 - the plugin's budget, kill on expiry
) -> PluginResponse:
    """Run the plugin once for ``image``; raises :class:`PluginError`."""
    what = f"credential provider plugin {provider.name} for image {image}"
    env = {**(os.environ if environ is None else environ), **dict(provider.env)}
    request = encode_request(provider.api_version, image, token, annotations)
    try:
        proc = await asyncio.create_subprocess_exec(
            provider.binary,
            *provider.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        raise PluginError(f"error execing {what}: {e.strerror or e}") from None
    try:
        async with asyncio.timeout(timeout):
            if proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(request)
                    await proc.stdin.drain()
                proc.stdin.close()
            (stdout, too_long), (stderr, _) = await asyncio.gather(
                _read(proc.stdout, MAX_STDOUT), _read(proc.stderr, MAX_STDERR)
            )
            code = await proc.wait()
    except TimeoutError:
        _kill_group(proc)
        await proc.wait()
        raise PluginError(
            f"error execing {what}: context deadline exceeded (no answer in {timeout:g}s)"
        ) from None
    except BaseException:
        _kill_group(proc)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    _kill_group(proc)  # whatever it left behind in its group
    shown = stderr.decode(errors="replace").strip()[:SHOWN_STDERR]
    if code != 0:
        status = f"signal: {-code}" if code < 0 else f"exit status {code}"
        raise PluginError(f"error execing {what}: {status}: {shown}")
    if too_long:
        raise PluginError(f"{what}: response larger than {MAX_STDOUT} bytes")
    return decode_response(stdout, provider.api_version)
