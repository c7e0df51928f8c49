"""Exec credential provider plugins: one real run each (small scripts), bounded and
reported; the provider's cache, as the kubelet's plugin_test.go."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from nodeagent.clock import RealClock
from nodeagent.credentialprovider import DockerConfigEntry
from nodeagent.credentialprovider.plugin import PluginProvider, PluginProviders, ProviderConfig
from nodeagent.credentialprovider.plugin.exec import (
    PluginError,
    PluginResponse,
    decode_response,
    run_plugin,
)

V1 = "credentialprovider.kubelet.k8s.io/v1"


def provider(tmp_path: Path, script: str, **kw: object) -> ProviderConfig:
    binary = tmp_path / "plugin"
    binary.write_text(f"#!{sys.executable}\n{script}\n")
    binary.chmod(0o755)
    fields: dict = dict(
        name="plugin",
        binary=str(binary),
        match_images=("*.example.com",),
        default_cache_duration=300.0,
        api_version=V1,
    )
    fields.update(kw)
    return ProviderConfig(**fields)


async def test_a_plugin_answers_on_stdout(tmp_path: Path) -> None:
    script = (
        "import json, sys; req = json.load(sys.stdin); json.dump({'kind': "
        f"'CredentialProviderResponse', 'apiVersion': '{V1}', 'cacheKeyType': 'Image', "
        "'auth': {req['image']: {'username': 'u', 'password': 'p'}}}, sys.stdout)"
    )
    response = await run_plugin(provider(tmp_path, script), image="r.example.com/app")
    assert response.cache_key_type == "Image"
    assert response.auth["r.example.com/app"].password == "p"


async def test_a_hanging_plugin_is_killed_after_its_time(tmp_path: Path) -> None:
    hang = provider(tmp_path, "import time; time.sleep(60)")
    with pytest.raises(PluginError, match="context deadline exceeded"):
        await run_plugin(hang, image="r.example.com/app", timeout=0.5)


async def test_garbage_on_stdout_is_reported_without_quoting_it(tmp_path: Path) -> None:
    garbage = provider(tmp_path, "print('hunter2 not json')")
    with pytest.raises(PluginError) as e:
        await run_plugin(garbage, image="r.example.com/app")
    assert "hunter2" not in str(e.value)


async def test_a_failing_plugin_reports_its_exit_status_and_stderr(tmp_path: Path) -> None:
    failing = provider(tmp_path, "import sys; sys.stderr.write('no token'); sys.exit(3)")
    with pytest.raises(PluginError, match="exit status 3: no token"):
        await run_plugin(failing, image="r.example.com/app")


def test_a_response_of_another_api_version_is_refused() -> None:
    data = json.dumps({"kind": "CredentialProviderResponse", "apiVersion": "x/v1"}).encode()
    with pytest.raises(PluginError, match="did not match expected apiVersion"):
        decode_response(data, V1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_answers_are_cached_by_key_type_for_their_duration(tmp_path: Path) -> None:
    runs: list[str] = []

    async def run(
        config: ProviderConfig, *, image: str, token: str, annotations: object
    ) -> PluginResponse:
        runs.append(image)
        await asyncio.sleep(0)
        return PluginResponse("Registry", None, {"r.example.com": DockerConfigEntry("u", "p")})

    clock = Clock()
    p = PluginProvider(provider(tmp_path, ""), monotonic=clock, run=run)
    providers = PluginProviders([p])
    found = await asyncio.gather(
        providers.lookup("r.example.com/a", None), providers.lookup("r.example.com/a", None)
    )
    assert [len(f) for f in found] == [1, 1]
    await providers.lookup("r.example.com/b", None)  # the registry's entry serves it
    assert runs == ["r.example.com/a"]
    clock.now = 301.0
    await providers.lookup("r.example.com/b", None)
    assert runs == ["r.example.com/a", "r.example.com/b"]
    assert await providers.lookup("other.io/a", None) == []  # not in matchImages
    assert runs == ["r.example.com/a", "r.example.com/b"]


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("1m30s", 90.0), ("0s", 0.0), ("1.5h", 5400.0), ("250ms", 0.25)],
)
def test_a_response_cache_duration_is_read_as_go_reads_it(duration: str, seconds: float) -> None:
    data = json.dumps(
        {
            "kind": "CredentialProviderResponse",
            "apiVersion": V1,
            "cacheKeyType": "Image",
            "cacheDuration": duration,
        }
    ).encode()
    assert decode_response(data, V1).cache_duration == seconds


@pytest.mark.parametrize("duration", ["1d", 90, "", "5"])
def test_a_cache_duration_go_would_not_read_is_refused(duration: object) -> None:
    data = json.dumps(
        {
            "kind": "CredentialProviderResponse",
            "apiVersion": V1,
            "cacheKeyType": "Image",
            "cacheDuration": duration,
            "auth": {"r.example.com": {"username": "u", "password": "hunter2"}},
        }
    ).encode()
    with pytest.raises(PluginError, match="error decoding") as e:
        decode_response(data, V1)
    assert "hunter2" not in str(e.value)


def test_a_provider_is_built_before_the_event_loop_runs(tmp_path: Path) -> None:
    """The daemon builds its managers before ``asyncio.run``: a provider on the loop's clock
    must not read it then (it crashed the daemon whenever a plugin was configured)."""
    PluginProvider(provider(tmp_path, ""), monotonic=RealClock().monotonic)
