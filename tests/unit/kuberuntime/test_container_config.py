"""ContainerConfig from a pod's container: env and downward API, command, resources, labels."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime.container import build_container_config
from nodeagent.kuberuntime.env import ContainerConfigError, EnvInputs, expand
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.kuberuntime.resources import SwapInputs
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

GiB = 2**30
SETTINGS = PodRuntimeSettings(node_name="node-a", memory_capacity=16 * GiB)
INPUTS = EnvInputs(
    pod_ips=("10.88.0.5", "fd00::5"),
    host_ips=("192.0.2.10",),
    node_allocatable={"cpu": "2", "memory": "8Gi"},
)


def build(
    p: Pod, inputs: EnvInputs = INPUTS, restart_count: int = 0, index: int = 0
) -> api.ContainerConfig:
    return build_container_config(
        p,
        p.spec.containers[index],
        image_ref="sha256:abc",
        restart_count=restart_count,
        settings=SETTINGS,
        inputs=inputs,
    )


def env_of(config: api.ContainerConfig) -> dict[str, str]:
    return {kv.key: kv.value.decode() for kv in config.envs}


def test_identity_image_log_path_labels_and_annotations() -> None:
    p = pod(
        "web",
        namespace="shop",
        uid="u-1",
        grace=45,
        containers=[
            container(
                "app",
                command=["/bin/sh"],
                args=["-c", "echo hi"],
                workingDir="/srv",
                ports=[{"containerPort": 80, "protocol": "TCP"}],
            )
        ],
    )
    config = build(p, restart_count=3)
    assert (config.metadata.name, config.metadata.attempt) == ("app", 3)
    assert (config.image.image, config.image.user_specified_image) == (
        "sha256:abc",
        "localhost/busybox:latest",
    )
    assert (list(config.command), list(config.args), config.working_dir) == (
        ["/bin/sh"],
        ["-c", "echo hi"],
        "/srv",
    )
    assert config.log_path == "app/3.log"
    assert dict(config.labels) == {
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "shop",
        "io.kubernetes.pod.uid": "u-1",
        "io.kubernetes.container.name": "app",
    }
    annotations = dict(config.annotations)
    assert annotations["io.kubernetes.container.restartCount"] == "3"
    assert annotations["io.kubernetes.pod.terminationGracePeriod"] == "45"
    assert annotations["io.kubernetes.container.terminationMessagePath"] == "/dev/termination-log"
    assert annotations["io.kubernetes.container.ports"] == (
        '[{"containerPort":80,"protocol":"TCP"}]'
    )
    assert len(annotations["io.kubernetes.container.hash"]) <= 8


def test_env_literal_values_expand_earlier_variables_and_keep_unknown_references() -> None:
    env = [
        {"name": "A", "value": "x"},
        {"name": "B", "value": "$(A)-$(MISSING)-$$(A)"},
        {"name": "C", "value": "$(B)"},
    ]
    config = build(pod(containers=[container("app", env=env, args=["$(C)", "$(NOPE)"])]))
    assert env_of(config) == {"A": "x", "B": "x-$(MISSING)-$(A)", "C": "x-$(MISSING)-$(A)"}
    assert list(config.args) == ["x-$(MISSING)-$(A)", "$(NOPE)"]


def field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_downward_api_field_refs() -> None:
    paths = {
        "NAME": "metadata.name",
        "NS": "metadata.namespace",
        "UID": "metadata.uid",
        "NODE": "spec.nodeName",
        "HOST": "spec.host",  # old v1 clients' name for spec.nodeName
        "SA": "spec.serviceAccountName",
        "POD_IP": "status.podIP",
        "POD_IPS": "status.podIPs",
        "HOST_IP": "status.hostIP",
        "TIER": "metadata.labels['tier']",
        "NOTE": "metadata.annotations['note']",
        "LABELS": "metadata.labels",
    }
    env = [{"name": k, **field(v)} for k, v in paths.items()]
    p = pod(
        "web",
        namespace="shop",
        uid="u-1",
        node="node-a",
        serviceAccountName="robot",
        labels={"tier": "front", "app": "web"},
        annotations={"note": "hello"},
        containers=[container("app", env=env)],
    )
    assert env_of(build(p)) == {
        "NAME": "web",
        "NS": "shop",
        "UID": "u-1",
        "NODE": "node-a",
        "HOST": "node-a",
        "SA": "robot",
        "POD_IP": "10.88.0.5",
        "POD_IPS": "10.88.0.5,fd00::5",
        "HOST_IP": "192.0.2.10",
        "TIER": "front",
        "NOTE": "hello",
        "LABELS": 'app="web"\ntier="front"',
    }


def resource(name: str, divisor: str | None = None, container_name: str = "") -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": name}
    if divisor:
        ref["divisor"] = divisor
    if container_name:
        ref["containerName"] = container_name
    return {"valueFrom": {"resourceFieldRef": ref}}


def test_downward_api_resource_refs_round_up_and_default_limits_to_allocatable() -> None:
    env = [
        {"name": "CPU_REQ", **resource("requests.cpu")},
        {"name": "CPU_REQ_M", **resource("requests.cpu", "1m")},
        {"name": "MEM_LIM_MI", **resource("limits.memory", "1Mi")},
        {"name": "CPU_LIM", **resource("limits.cpu")},
        {"name": "OTHER_MEM_REQ", **resource("requests.memory", container_name="side")},
    ]
    p = pod(
        containers=[
            container("app", env=env, requests={"cpu": "250m"}, limits={"memory": "100M"}),
            container("side", requests={"memory": "1Ki"}),
        ]
    )
    assert env_of(build(p)) == {
        "CPU_REQ": "1",  # 250m rounded up to whole cores
        "CPU_REQ_M": "250",
        "MEM_LIM_MI": "96",  # 100M / 1Mi = 95.37 -> 96
        "CPU_LIM": "2",  # no limit: node allocatable
        "OTHER_MEM_REQ": "1024",
    }


def test_downward_api_resource_refs_of_the_e2e_spec() -> None:
    """'should provide container's limits.cpu/memory and requests.cpu/memory as env vars'."""
    env = [
        {"name": "CPU_LIMIT", **resource("limits.cpu")},
        {"name": "MEMORY_LIMIT", **resource("limits.memory")},
        {"name": "CPU_REQUEST", **resource("requests.cpu")},
        {"name": "MEMORY_REQUEST", **resource("requests.memory")},
    ]
    p = pod(
        containers=[
            container(
                "dapi-container",
                env=env,
                requests={"cpu": "250m", "memory": "32Mi"},
                limits={"cpu": "1250m", "memory": "64Mi"},
            )
        ]
    )
    assert env_of(build(p)) == {
        "CPU_LIMIT": "2",
        "MEMORY_LIMIT": "67108864",
        "CPU_REQUEST": "1",
        "MEMORY_REQUEST": "33554432",
    }


def test_a_zero_limit_is_the_node_allocatable_and_named_init_containers_keep_theirs() -> None:
    """As the kubelet's defaultPodLimitsForDownwardAPI: a zero limit counts as none; a ref
    naming an init container reads it without defaults (only the regular containers and the
    container itself get them)."""
    env = [
        {"name": "ZERO_CPU", **resource("limits.cpu")},
        {"name": "ZERO_MEM_MI", **resource("limits.memory", "1Mi")},
        {"name": "INIT_CPU", **resource("limits.cpu", container_name="setup")},
        {"name": "INIT_MEM", **resource("limits.memory", container_name="setup")},
        {"name": "SIDE_CPU", **resource("limits.cpu", container_name="side")},
    ]
    p = pod(
        containers=[
            container("app", env=env, limits={"cpu": "0", "memory": "0Mi"}),
            container("side"),
        ],
        init_containers=[container("setup", limits={"memory": "16Mi"})],
    )
    assert env_of(build(p)) == {
        "ZERO_CPU": "2",
        "ZERO_MEM_MI": "8192",
        "INIT_CPU": "0",
        "INIT_MEM": "16777216",
        "SIDE_CPU": "2",
    }


def test_an_init_containers_own_limits_default_to_the_node_allocatable() -> None:
    setup = container("setup", env=[{"name": "CPU", **resource("limits.cpu")}])
    p = pod(containers=[container("app")], init_containers=[setup])
    config = build_container_config(
        p,
        p.spec.init_containers[0],
        image_ref="sha256:abc",
        restart_count=0,
        settings=SETTINGS,
        inputs=INPUTS,
    )
    assert env_of(config) == {"CPU": "2"}


def test_env_from_config_map_and_secret_then_env_overrides() -> None:
    inputs = EnvInputs(
        config_maps={"cfg": {"A": "from-cm", "B": "b"}},
        secrets={"sec": {"TOKEN": "t0k"}},
        service_env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "A": "svc"},
    )
    c = container(
        "app",
        envFrom=[{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec"}, "prefix": "S_"}],
        env=[
            {"name": "A", "value": "override"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
        ],
    )
    assert env_of(build(pod(containers=[c]), inputs)) == {
        "A": "override",
        "B": "b",
        "S_TOKEN": "t0k",
        "K": "b",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope"}}}],
            "couldn't find key nope in ConfigMap default/cfg",
            id="missing key in a ConfigMap",
        ),
        pytest.param(
            [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}],
            'secret "gone" not found',
            id="missing Secret",
        ),
        pytest.param(
            [{"name": "X", **field("status.nothing")}],
            "field label not supported: status.nothing",
            id="unknown field path",
        ),
        pytest.param(
            [{"name": "X", **field("status.phase")}],
            "unsupported fieldPath: status.phase",
            id="a field label the kubelet does not resolve",
        ),
        pytest.param(
            [{"name": "X", **field("spec.nodeSelector['zone']")}],
            "field label does not support subscript: spec.nodeSelector['zone']",
            id="subscript on a field without keys",
        ),
        pytest.param(
            [{"name": "X", "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": "x"}}}],
            "unsupported pod version: v2",
            id="field reference of another API version",
        ),
        pytest.param(
            [{"name": "X", **resource("limits.gpu")}],
            "unsupported container resource : limits.gpu",
            id="unsupported resource",
        ),
    ],
)
def test_unresolvable_env_is_a_container_config_error(
    env: list[dict[str, Any]], message: str
) -> None:
    inputs = EnvInputs(config_maps={"cfg": {"A": "1"}})
    with pytest.raises(ContainerConfigError) as err:
        build(pod(containers=[container("app", env=env)]), inputs)
    assert str(err.value) == message


def test_optional_references_are_skipped() -> None:
    env = [
        {
            "name": "X",
            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "no", "optional": True}},
        },
        {"name": "Y", "valueFrom": {"secretKeyRef": {"name": "no", "key": "k", "optional": True}}},
    ]
    c = container("app", env=env, envFrom=[{"configMapRef": {"name": "gone", "optional": True}}])
    assert env_of(build(pod(containers=[c]), EnvInputs(config_maps={"cfg": {}}))) == {}


def test_expand_handles_escapes_and_unterminated_references() -> None:
    values = {"A": "1"}.get
    assert expand("$(A)$$(A)$$$(A)$(A", values) == "1$(A)$1$(A"


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        pytest.param({}, {}, (2, 0, 0, 1000), id="best effort: minimum shares, no limits"),
        pytest.param(
            {"cpu": "250m", "memory": "4Gi"},
            {},
            (256, 0, 0, 750),
            id="burstable: shares from request, oom from memory request",
        ),
        pytest.param(
            {}, {"cpu": "500m"}, (512, 50000, 0, 999), id="limit only: shares default to limit"
        ),
        pytest.param(
            {"cpu": "2", "memory": "1Gi"},
            {"cpu": "2", "memory": "1Gi"},
            (2048, 200000, GiB, -997),
            id="guaranteed",
        ),
        pytest.param(
            {"memory": "16Gi"}, {}, (2, 0, 0, 3), id="burstable requesting all memory floors at 3"
        ),
        pytest.param({"cpu": "1m"}, {"cpu": "1m"}, (2, 1000, 0, 999), id="tiny limit: min quota"),
    ],
)
def test_resources_become_linux_container_resources(
    requests: dict[str, str], limits: dict[str, str], expected: tuple[int, int, int, int]
) -> None:
    """(cpu shares, CFS quota, memory limit, OOM score adj); the CFS period is 100ms."""
    p = pod(containers=[container("app", requests=requests, limits=limits)])
    r = build(p).linux.resources
    assert r.cpu_period == 100000
    assert (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes, r.oom_score_adj) == expected


def test_cgroup_v2_containers_get_oom_group_and_their_swap_limit() -> None:
    """The kubelet on cgroup v2: ``memory.oom.group`` 1 unless ``singleProcessOOMKill``, and
    ``memory.swap.max`` (LimitedSwap: request / memory x swap for Burstable, else 0)."""
    swap = SwapInputs(
        behavior="LimitedSwap", cgroup_v2=True, controller=True,
        memory_capacity=16 * GiB, swap_capacity=GiB,
    )  # fmt: skip
    v2 = dataclasses.replace(SETTINGS, cgroup_v2=True, swap=swap)
    burstable = pod(
        containers=[container("app", requests={"memory": "1Gi"}, limits={"memory": "2Gi"})]
    )
    r = build_container_config(
        burstable, burstable.spec.containers[0], image_ref="sha256:abc", restart_count=0,
        settings=v2, inputs=INPUTS,
    ).linux.resources  # fmt: skip
    assert dict(r.unified) == {"memory.oom.group": "1", "memory.swap.max": str(GiB // 16)}
    single = dataclasses.replace(v2, single_process_oom_kill=True)
    besteffort = pod(containers=[container("app")])
    r = build_container_config(
        besteffort, besteffort.spec.containers[0], image_ref="sha256:abc", restart_count=0,
        settings=single, inputs=INPUTS,
    ).linux.resources  # fmt: skip
    assert dict(r.unified) == {"memory.swap.max": "0"}
    # cgroup v1 (this CI host): nothing in unified, as before.
    assert dict(build(burstable).linux.resources.unified) == {}


def test_security_context_container_overrides_pod() -> None:
    p = pod(
        securityContext={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
        containers=[
            container(
                "app",
                securityContext={
                    "runAsUser": 1001,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                },
            )
        ],
    )
    sc = build(p).linux.security_context
    assert (sc.run_as_user.value, sc.run_as_group.value) == (1001, 1000)
    assert (sc.readonly_rootfs, sc.no_new_privs, sc.privileged) == (True, True, False)
    assert list(sc.capabilities.add_capabilities) == ["NET_ADMIN"]
    assert list(sc.capabilities.drop_capabilities) == ["ALL"]
    assert list(sc.supplemental_groups) == [2000]
    assert "/proc/kcore" in sc.masked_paths
    assert "/proc/sys" in sc.readonly_paths
    assert sc.seccomp.profile_type == api.SecurityProfile.Unconfined


def test_run_as_non_root_with_user_zero_is_refused() -> None:
    c = container("app", securityContext={"runAsNonRoot": True, "runAsUser": 0})
    with pytest.raises(ContainerConfigError, match="container's runAsUser breaks non-root policy"):
        build(pod("web", containers=[c]))
