"""Payloads of configMap, secret, downwardAPI and projected volumes, with the kubelet's errors."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.podspec import Pod, Volume, decode_pod
from nodeagent.volumemanager.content.errors import VolumeSetupError
from nodeagent.volumemanager.content.payloads import (
    FetchError,
    Inputs,
    ObjectData,
    References,
    format_map,
    references,
    volume_payload,
)
from nodeagent.volumemanager.content.writer import FileProjection as F

CM = ObjectData({"a": b"1", "b": b"2", "bin": b"\x00\xff"})
SECRET = ObjectData({"user": b"admin", "pass": b"s3cret"})


def pod_with(*volumes: dict[str, Any], **spec: Any) -> Pod:
    return decode_pod(
        {
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "uid": "uid-1",
                "labels": {"tier": "front", "app": "web"},
                "annotations": {"note": 'say "hi"\n\tnow', "ünï": "cödé"},
            },
            "spec": {
                "serviceAccountName": "builder",
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "limits": {"memory": "64Mi", "cpu": "500m"},
                            "requests": {"cpu": "250m"},
                        },
                    }
                ],
                "volumes": list(volumes),
                **spec,
            },
        }
    )


def payload(pod: Pod, inputs: Inputs | None = None) -> dict[str, F]:
    return volume_payload(pod, pod.spec.volumes[0], inputs or Inputs())


def error(pod: Pod, inputs: Inputs | None = None) -> str:
    with pytest.raises(VolumeSetupError) as raised:
        payload(pod, inputs)
    return raised.value.message


def cm_volume(**source: Any) -> dict[str, Any]:
    return {"name": "cfg", "configMap": {"name": "y", **source}}


# --- configMap and secret ---------------------------------------------------------------------


def test_config_map_without_items_holds_every_key_with_default_mode() -> None:
    pod = pod_with(cm_volume(defaultMode=0o640))
    assert payload(pod, Inputs(config_maps={"y": CM})) == {
        "a": F(b"1", 0o640),
        "b": F(b"2", 0o640),
        "bin": F(b"\x00\xff", 0o640),
    }


def test_config_map_items_choose_keys_paths_and_modes() -> None:
    items = [{"key": "a", "path": "x/a.conf", "mode": 0o600}, {"key": "bin", "path": "b"}]
    pod = pod_with(cm_volume(items=items))
    assert payload(pod, Inputs(config_maps={"y": CM})) == {
        "x/a.conf": F(b"1", 0o600),
        "b": F(b"\x00\xff", 0o644),
    }


def test_config_map_missing_key_fails_unless_optional() -> None:
    items = [{"key": "a", "path": "a"}, {"key": "nope", "path": "n"}]
    inputs = Inputs(config_maps={"y": CM})
    assert (
        error(pod_with(cm_volume(items=items)), inputs)
        == "configmap references non-existent config key: nope"
    )
    assert payload(pod_with(cm_volume(items=items, optional=True)), inputs) == {"a": F(b"1", 0o644)}


def test_missing_config_map_fails_unless_optional() -> None:
    assert error(pod_with(cm_volume()), Inputs(config_maps={"y": None})) == (
        'configmap "y" not found'
    )
    assert payload(pod_with(cm_volume(optional=True)), Inputs(config_maps={"y": None})) == {}


def test_a_failed_fetch_fails_even_when_optional() -> None:
    inputs = Inputs(config_maps={"y": FetchError("connection refused")})
    assert error(pod_with(cm_volume(optional=True)), inputs) == "connection refused"


def test_secret_volume() -> None:
    volume = {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400}}
    inputs = Inputs(secrets={"creds": SECRET})
    assert payload(pod_with(volume), inputs) == {
        "user": F(b"admin", 0o400),
        "pass": F(b"s3cret", 0o400),
    }
    assert error(pod_with(volume), Inputs(secrets={"creds": None})) == 'secret "creds" not found'
    keyed = {"name": "s", "secret": {"secretName": "creds", "items": [{"key": "k", "path": "k"}]}}
    assert error(pod_with(keyed), inputs) == "references non-existent secret key: k"


# --- downward API -----------------------------------------------------------------------------


def downward(*items: dict[str, Any], **source: Any) -> dict[str, Any]:
    return {"name": "info", "downwardAPI": {"items": list(items), **source}}


def field(path: str, field_path: str, **kw: Any) -> dict[str, Any]:
    return {"path": path, "fieldRef": {"fieldPath": field_path}, **kw}


def test_downward_api_metadata_fields() -> None:
    pod = pod_with(
        downward(
            field("name", "metadata.name"),
            field("ns", "metadata.namespace", mode=0o600),
            field("uid", "metadata.uid"),
            field("labels", "metadata.labels"),
            field("annotations", "metadata.annotations"),
            field("tier", "metadata.labels['tier']"),
            field("note", "metadata.annotations['note']"),
            field("absent", "metadata.labels['absent']"),
        )
    )
    got = {k: (v.data.decode(), oct(v.mode)) for k, v in payload(pod).items()}
    assert got == {
        "name": ("web", "0o644"),
        "ns": ("shop", "0o600"),
        "uid": ("uid-1", "0o644"),
        "labels": ('app="web"\ntier="front"', "0o644"),
        "annotations": ('note="say \\"hi\\"\\n\\tnow"\nünï="cödé"', "0o644"),
        "tier": ("front", "0o644"),
        "note": ('say "hi"\n\tnow', "0o644"),
        "absent": ("", "0o644"),
    }


def test_downward_api_resources_with_divisor_and_allocatable() -> None:
    def res(path: str, resource: str, divisor: str | None = None) -> dict[str, Any]:
        ref: dict[str, Any] = {"containerName": "main", "resource": resource}
        if divisor:
            ref["divisor"] = divisor
        return {"path": path, "resourceFieldRef": ref}

    pod = pod_with(
        downward(
            res("mem", "limits.memory", "1Mi"),
            res("cpu_m", "requests.cpu", "1m"),
            res("cpu", "limits.cpu"),
            res("storage", "limits.ephemeral-storage", "1Gi"),
        )
    )
    inputs = Inputs(allocatable={"ephemeral-storage": "10Gi", "memory": "1Gi", "cpu": "2"})
    got = {k: v.data.decode() for k, v in payload(pod, inputs).items()}
    assert got == {"mem": "64", "cpu_m": "250", "cpu": "1", "storage": "10"}


def test_downward_api_volume_defaults_zero_limits_and_init_containers_too() -> None:
    """The volume plugin merges the node's allocatable into whichever container is named
    (init containers included) and, as for env vars, replaces a zero limit."""

    def res(path: str, name: str, resource: str) -> dict[str, Any]:
        return {"path": path, "resourceFieldRef": {"containerName": name, "resource": resource}}

    pod = pod_with(
        downward(
            res("init_cpu", "setup", "limits.cpu"),
            res("init_mem", "setup", "limits.memory"),
            res("zero_cpu", "zero", "limits.cpu"),
        ),
        initContainers=[{"name": "setup", "resources": {"limits": {"memory": "16Mi"}}}],
        containers=[{"name": "main"}, {"name": "zero", "resources": {"limits": {"cpu": "0"}}}],
    )
    inputs = Inputs(allocatable={"memory": "1Gi", "cpu": "3"})
    got = {k: v.data.decode() for k, v in payload(pod, inputs).items()}
    assert got == {"init_cpu": "3", "init_mem": "16777216", "zero_cpu": "3"}


def test_downward_api_errors_are_aggregated() -> None:
    pod = pod_with(
        downward(
            field("node", "spec.nodeName"),
            field("x", "metadata.name"),
            {"path": "r", "resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}},
        )
    )
    assert error(pod) == "[unsupported fieldPath: spec.nodeName, container nope not found]"
    one = pod_with(downward(field("node", "status.podIP")))
    assert error(one) == "unsupported fieldPath: status.podIP"


def test_format_map_is_sorted_percent_q_lines() -> None:
    assert format_map({"a": 'say "hi"\n'}) == 'a="say \\"hi\\"\\n"'
    assert format_map({"b": "2", "a": "1"}) == 'a="1"\nb="2"'
    assert format_map({}) == ""


# --- projected --------------------------------------------------------------------------------


KUBE_API_ACCESS: dict[str, Any] = {
    "name": "kube-api-access-x7k2p",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    },
}
ROOT_CA = ObjectData({"ca.crt": b"-----BEGIN CERTIFICATE-----\n"})


def test_kube_api_access_volume() -> None:
    pod = pod_with(KUBE_API_ACCESS)
    assert references(pod.spec.volumes[0]) == References(
        config_maps=frozenset({"kube-root-ca.crt"}), tokens=frozenset({("", 3607)})
    )
    inputs = Inputs(config_maps={"kube-root-ca.crt": ROOT_CA}, tokens={("", 3607): b"eyJ.tok"})
    assert payload(pod, inputs) == {
        "token": F(b"eyJ.tok", 0o644),
        "ca.crt": F(b"-----BEGIN CERTIFICATE-----\n", 0o644),
        "namespace": F(b"shop", 0o644),
    }


def test_token_is_private_when_the_pod_has_an_fs_group() -> None:
    pod = pod_with(KUBE_API_ACCESS, securityContext={"fsGroup": 0})
    inputs = Inputs(config_maps={"kube-root-ca.crt": ROOT_CA}, tokens={("", 3607): b"t"})
    got = payload(pod, inputs)
    assert got["token"] == F(b"t", 0o600)
    assert got["ca.crt"].mode == 0o644


def test_projected_errors_of_all_sources_are_aggregated() -> None:
    pod = pod_with(KUBE_API_ACCESS)
    inputs = Inputs(
        config_maps={"kube-root-ca.crt": None},
        tokens={
            ("", 3607): FetchError('failed to fetch token: serviceaccounts "builder" not found')
        },
    )
    assert error(pod, inputs) == (
        '[failed to fetch token: serviceaccounts "builder" not found, '
        'configmap "kube-root-ca.crt" not found]'
    )


def test_projected_merges_sources_in_order_with_optional_ones() -> None:
    volume = {
        "name": "all",
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"configMap": {"name": "y", "items": [{"key": "a", "path": "same"}]}},
                {"secret": {"name": "creds", "items": [{"key": "user", "path": "same"}]}},
                {"secret": {"name": "gone", "optional": True}},
                {
                    "configMap": {
                        "name": "y",
                        "items": [{"key": "zz", "path": "z"}],
                        "optional": True,
                    }
                },
            ],
        },
    }
    inputs = Inputs(config_maps={"y": CM}, secrets={"creds": SECRET, "gone": None})
    assert payload(pod_with(volume), inputs) == {"same": F(b"admin", 0o444)}


@pytest.mark.parametrize("name", ["clusterTrustBundle", "podCertificate"])
def test_unsupported_projections_fail_by_name(name: str) -> None:
    volume = {"name": "p", "projected": {"sources": [{name: {"path": "x"}}]}}
    assert error(pod_with(volume)) == f"{name} is not supported on this node"


def test_volume_without_content_source() -> None:
    pod = pod_with({"name": "scratch", "emptyDir": {}})
    volume: Volume = pod.spec.volumes[0]
    with pytest.raises(VolumeSetupError):
        volume_payload(pod, volume, Inputs())
