"""Pod specs the agent must refuse, or honour, with the kubelet's observable result.

runAsNonRoot against the image's user, seccomp profiles in the CRI config, names checked before
they become paths, and the downward API's divisor: a ``CreateContainerConfigError`` with a
clear message and a ``Failed`` event, never a traceback in the worker.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime.container import ImageUser, build_container_config
from nodeagent.kuberuntime.env import ContainerConfigError, EnvInputs
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import CREATE_CONTAINER_CONFIG_ERROR, PodEvent
from nodeagent.kuberuntime.runtime_state import PodRuntimeState
from nodeagent.lifecycle.admission import admit_pod
from nodeagent.podspec import Pod, PodSpecError, decode_checked_pod, decode_pod
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod, pod_object

SETTINGS = PodRuntimeSettings(node_name="node-a", root_dir="/var/lib/nodeagent")
UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"


def build(
    p: Pod, *, settings: PodRuntimeSettings = SETTINGS, user: ImageUser | None = None
) -> api.ContainerConfig:
    return build_container_config(
        p,
        p.spec.containers[0],
        image_ref="sha256:abc",
        restart_count=0,
        settings=settings,
        inputs=EnvInputs(host_ips=("192.0.2.10",)),
        image_user=user,
    )


def non_root_pod(**csc: Any) -> Pod:
    return pod(
        "web",
        uid=UID,
        containers=[container("app", securityContext={"runAsNonRoot": True, **csc})],
    )


# --- runAsNonRoot ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "message"),
    [
        pytest.param(
            ImageUser(uid=0),
            f'container has runAsNonRoot and image will run as root (pod: "web_default({UID})",'
            " container: app)",
            id="image user 0",
        ),
        pytest.param(
            ImageUser(),
            f'container has runAsNonRoot and image will run as root (pod: "web_default({UID})",'
            " container: app)",
            id="image without a user runs as root",
        ),
        pytest.param(
            ImageUser(username="nobody"),
            "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify "
            f'user is non-root (pod: "web_default({UID})", container: app)',
            id="image with a user name",
        ),
    ],
)
def test_run_as_non_root_refuses_an_image_that_runs_as_root(user: ImageUser, message: str) -> None:
    with pytest.raises(ContainerConfigError) as caught:
        build(non_root_pod(), user=user)
    assert str(caught.value) == message


def test_run_as_non_root_accepts_a_numeric_non_root_image_user_or_an_explicit_run_as_user() -> None:
    assert not build(non_root_pod(), user=ImageUser(uid=65534)).linux.security_context.HasField(
        "run_as_user"
    )
    config = build(non_root_pod(runAsUser=1000), user=ImageUser(uid=0))
    assert config.linux.security_context.run_as_user.value == 1000


async def test_run_as_non_root_with_a_root_image_waits_with_create_container_config_error() -> None:
    runtime = FakeRuntime(runtime_name="containerd")
    runtime.add_image(BUSYBOX)  # no uid in its status: root, as busybox is
    manager = RuntimeManager(
        runtime=runtime, images=runtime, settings=SETTINGS, clock=LoopClock(), files=MemoryFiles()
    )
    p = non_root_pod()
    result = await manager.sync_pod(
        p,
        PodRuntimeState(uid=p.uid),
        inputs=EnvInputs(),
        host_dns=ResolvConf(servers=("192.0.2.53",)),
    )
    failure = result.failures["app"]
    assert failure.reason == CREATE_CONTAINER_CONFIG_ERROR
    assert failure.message.startswith("container has runAsNonRoot and image will run as root")
    assert PodEvent("Warning", "Failed", f"Error: {failure.message}", "app") in result.events
    assert await runtime.list_containers() == []


async def test_run_as_non_root_with_an_image_of_a_numeric_user_starts() -> None:
    runtime = FakeRuntime(runtime_name="containerd")
    image = runtime.add_image(BUSYBOX)
    image.uid.value = 1000
    manager = RuntimeManager(
        runtime=runtime, images=runtime, settings=SETTINGS, clock=LoopClock(), files=MemoryFiles()
    )
    p = non_root_pod()
    result = await manager.sync_pod(
        p, PodRuntimeState(uid=p.uid), inputs=EnvInputs(), host_dns=ResolvConf()
    )
    assert result.failures == {} and result.started == ["app"]


# --- seccomp --------------------------------------------------------------------------------


def seccomp_of(config: api.ContainerConfig) -> api.SecurityProfile:
    return config.linux.security_context.seccomp


@pytest.mark.parametrize(
    ("pod_profile", "container_profile", "default", "expected"),
    [
        pytest.param(
            None, None, False, (api.SecurityProfile.Unconfined, ""), id="none: Unconfined"
        ),
        pytest.param(
            None, None, True, (api.SecurityProfile.RuntimeDefault, ""), id="seccompDefault"
        ),
        pytest.param(
            {"type": "RuntimeDefault"},
            None,
            False,
            (api.SecurityProfile.RuntimeDefault, ""),
            id="pod RuntimeDefault",
        ),
        pytest.param(
            {"type": "RuntimeDefault"},
            {"type": "Unconfined"},
            True,
            (api.SecurityProfile.Unconfined, ""),
            id="container Unconfined wins over pod and seccompDefault",
        ),
        pytest.param(
            None,
            {"type": "Localhost", "localhostProfile": "profiles/audit.json"},
            False,
            (api.SecurityProfile.Localhost, "/var/lib/nodeagent/seccomp/profiles/audit.json"),
            id="container Localhost under rootDir/seccomp",
        ),
    ],
)
def test_seccomp_profile_reaches_the_cri_config(
    pod_profile: dict[str, str] | None,
    container_profile: dict[str, str] | None,
    default: bool,
    expected: tuple[int, str],
) -> None:
    p = pod(
        "web",
        containers=[
            container(
                "app",
                **(
                    {"securityContext": {"seccompProfile": container_profile}}
                    if container_profile
                    else {}
                ),
            )
        ],
        **({"securityContext": {"seccompProfile": pod_profile}} if pod_profile else {}),
    )
    settings = PodRuntimeSettings(node_name="node-a", seccomp_default=default)
    profile = seccomp_of(build(p, settings=settings))
    assert (profile.profile_type, profile.localhost_ref) == expected


@pytest.mark.parametrize(
    ("profile", "field", "message"),
    [
        pytest.param(
            {"type": "Localhost"},
            "spec.containers[0].securityContext.seccompProfile.localhostProfile",
            "Required value: must be set when seccomp type is Localhost",
            id="Localhost without a profile",
        ),
        pytest.param(
            {"type": "Localhost", "localhostProfile": "../../etc/shadow"},
            "spec.containers[0].securityContext.seccompProfile.localhostProfile",
            "Invalid value: \"../../etc/shadow\": must be a relative path without '..'",
            id="Localhost that climbs out",
        ),
        pytest.param(
            {"type": "Strict"},
            "spec.containers[0].securityContext.seccompProfile.type",
            'Unsupported value: "Strict": supported values: "RuntimeDefault", "Unconfined", '
            '"Localhost"',
            id="an unknown type",
        ),
    ],
)
def test_a_bad_seccomp_profile_is_refused_at_decode(
    profile: dict[str, str], field: str, message: str
) -> None:
    obj = pod_object(
        "web", containers=[container("app", securityContext={"seccompProfile": profile})]
    )
    with pytest.raises(PodSpecError) as caught:
        decode_pod(obj)
    assert (caught.value.field, caught.value.message) == (field, message)


# --- names, hostIP and quantities at decode -------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        pytest.param(
            {"containers": [container("../../../../etc/cron.d/x")]},
            "spec.containers[0].name",
            'Invalid value: "../../../../etc/cron.d/x": a lowercase RFC 1123 label must consist',
            id="a container name that is a path",
        ),
        pytest.param(
            {"name": "a" * 254},
            "metadata.name",
            "must be no more than 253 characters",
            id="a pod name of 254 characters",
        ),
        pytest.param(
            {"namespace": "../etc"},
            "metadata.namespace",
            'Invalid value: "../etc": a lowercase RFC 1123 label must consist',
            id="a namespace that is a path",
        ),
        pytest.param(
            {"uid": "../../x"},
            "metadata.uid",
            'Invalid value: "../../x": must be letters, digits',
            id="a uid that is a path",
        ),
        pytest.param(
            {
                "containers": [
                    container("app", ports=[{"containerPort": 80, "hostIP": "not-an-ip"}])
                ]
            },
            "spec.containers[0].ports[0].hostIP",
            'Invalid value: "not-an-ip": must be a valid IP address, '
            "(e.g. 10.9.8.7 or 2001:db8::ffff)",
            id="hostIP not-an-ip",
        ),
        pytest.param(
            {"containers": [container("app", limits={"memory": "1Gi2"})]},
            "spec.containers[0].resources.limits.memory",
            'Invalid value: "1Gi2": quantities must match the regular expression',
            id="memory limit 1Gi2",
        ),
        pytest.param(
            {"containers": [container("app", requests={"cpu": "1e100000000"})]},
            "spec.containers[0].resources.requests.cpu",
            'Invalid value: "1e100000000": quantities must match the regular expression',
            id="cpu request 1e100000000",
        ),
        pytest.param(
            {"overhead": {"memory": "lots"}},
            "spec.overhead.memory",
            'Invalid value: "lots": quantities must match',
            id="overhead that is not a quantity",
        ),
    ],
)
def test_a_pod_the_agent_must_not_run_is_refused_at_decode_naming_the_field(
    change: dict[str, Any], field: str, message: str
) -> None:
    name = change.pop("name", "web")
    obj = pod_object(name, **change)
    with pytest.raises(msgspec.ValidationError) as caught:
        decode_checked_pod(obj)
    error = caught.value
    assert isinstance(error, PodSpecError)
    assert error.field == field
    assert message in error.message
    assert str(error).endswith(f"- at `$.{field}`")


def test_long_values_are_cut_in_the_message() -> None:
    obj = pod_object("web", containers=[container("app", limits={"memory": "9" * 60 + "Gi2"})])
    with pytest.raises(PodSpecError) as caught:
        decode_checked_pod(obj)
    assert len(caught.value.message) < 250


# --- downward API divisor -------------------------------------------------------------------


@pytest.mark.parametrize("divisor", ["0.0", "0m", "-1"])
def test_a_divisor_that_is_not_positive_is_a_container_config_error(divisor: str) -> None:
    p = pod(
        "web",
        containers=[
            container(
                "app",
                limits={"cpu": "1"},
                env=[
                    {
                        "name": "CPU",
                        "valueFrom": {
                            "resourceFieldRef": {"resource": "limits.cpu", "divisor": divisor}
                        },
                    }
                ],
            )
        ],
    )
    with pytest.raises(ContainerConfigError) as caught:
        build(p)
    assert str(caught.value) == (
        f'invalid divisor "{divisor}" of resourceFieldRef limits.cpu: must be greater than zero'
    )


# --- admission ------------------------------------------------------------------------------


def test_admission_refuses_a_quantity_it_cannot_compute_with_instead_of_raising() -> None:
    p = msgspec.convert(
        pod_object("web", containers=[container("app", requests={"memory": "1Gi2"})]),
        Pod,
        strict=False,
    )  # built around the decode checks, as no source does
    result = admit_pod(p, allocatable={"pods": "110", "memory": "8Gi"}, admitted=[])
    assert not result.admit
    assert result.reason == "UnexpectedAdmissionError"
    assert "1Gi2" in result.message


@pytest.mark.parametrize("raw", [None, ["1Gi"], {"a": 1}, True])
def test_a_quantity_of_the_wrong_type_is_named_by_its_key(raw: object) -> None:
    obj = pod_object("web", containers=[container("app")])
    obj["spec"]["containers"][0]["resources"] = {"requests": {"memory": raw}}
    with pytest.raises(PodSpecError) as caught:
        decode_checked_pod(obj)
    assert caught.value.field == "spec.containers[0].resources.requests.memory"
    assert "quantities must match the regular expression" in caught.value.message


def test_volumes_decode_typed_and_keep_sources_the_agent_does_not_know_by_name() -> None:
    from nodeagent.podspec import decode_pod

    pod = decode_pod(
        {
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {
                "containers": [{"name": "c"}],
                "volumes": [
                    {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "repo", "gitRepo": {"repository": "https://example.invalid/r"}},
                    {
                        "name": "cfg",
                        "configMap": {"name": "app", "items": [{"key": "k", "path": "f"}]},
                    },
                    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                ],
            },
        }
    )
    claim, repo, cfg, scratch = pod.spec.volumes
    assert claim.source == "persistentVolumeClaim" and claim.other == {}
    assert claim.persistent_volume_claim is not None
    assert claim.persistent_volume_claim.claim_name == "data"
    assert (repo.source, repo.other) == (
        "gitRepo",
        {"gitRepo": {"repository": "https://example.invalid/r"}},
    )
    assert cfg.source == "configMap" and cfg.config_map is not None
    assert (cfg.config_map.name, cfg.config_map.default_mode, cfg.config_map.items[0].path) == (
        "app",
        0o644,
        "f",
    )
    assert scratch.source == "emptyDir" and scratch.empty_dir is not None
    assert scratch.empty_dir.medium == "Memory"
