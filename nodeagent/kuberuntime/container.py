"""The ContainerConfig of one container, as the kubelet's ``generateContainerConfig`` builds it.

Metadata (name, attempt = restart count), the resolved image, command and args with ``$(VAR)``
expanded, working dir, environment (``env.py``), the ``io.kubernetes.*`` labels and
annotations, the log path ``<container>/<restartCount>.log`` (relative to the sandbox's log
directory), mounts given by the caller, and the Linux part: resources (cpu shares, CFS quota,
memory limit, OOM score adjustment) and the security context. Pure.

The security context as the kubelet's ``determineEffectiveSecurityContext``: the seccomp profile
(container's, else pod's, else ``RuntimeDefault`` with ``seccompDefault``, else
``Unconfined``; ``Localhost`` profiles under ``<rootDir>/seccomp``), and ``runAsNonRoot``
verified against the user the image runs as (its CRI ``ImageStatus``: a uid, else a user name,
else root) when no ``runAsUser`` is set. What cannot be honoured raises
:class:`ContainerConfigError` (``CreateContainerConfigError``), never anything else.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.env import (
    ContainerConfigError,
    EnvInputs,
    expand_command,
    make_environment,
)
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.kuberuntime.resources import (
    OOM_GROUP_FILE,
    container_swap,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from nodeagent.kuberuntime.sandbox import namespace_options
from nodeagent.podspec import (
    Container,
    Pod,
    SeccompProfile,
    dns1123_label_problem,
    format_pod,
    show_value,
)
from nodeagent.qos import container_oom_score_adj
from nodeagent.quantity import milli_value, value

DEFAULT_MASKED_PATHS: Final = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS: Final = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)


@dataclass(frozen=True, slots=True)
class ImageUser:
    """Who the image runs as, from CRI ``ImageStatus``: ``uid`` when numeric, else
    ``username``; neither means root, as the kubelet's ``getImageUser`` reads it."""

    uid: int | None = None
    username: str = ""


ROOT: Final = ImageUser(uid=0)


def container_log_path(container: Container, restart_count: int) -> str:
    """``<container>/<restartCount>.log``; the name is checked first, as it becomes a path."""
    if problem := dns1123_label_problem(container.name):
        raise ContainerConfigError(
            f"invalid container name {show_value(container.name)}: {problem}"
        )
    return f"{container.name}/{restart_count}.log"


def linux_resources(
    pod: Pod, container: Container, settings: PodRuntimeSettings
) -> cri.LinuxContainerResources:
    requests, limits = container.resources.requests, container.resources.limits
    try:
        cpu_limit = milli_value(limits.get("cpu", 0))
        if "cpu" not in requests and "cpu" in limits:
            shares = milli_cpu_to_shares(cpu_limit)
        else:
            shares = milli_cpu_to_shares(milli_value(requests.get("cpu", 0)))
        memory_limit = value(limits.get("memory", 0))
        oom_score_adj = container_oom_score_adj(pod, container, settings.memory_capacity)
    except (ValueError, ArithmeticError) as e:
        raise ContainerConfigError(f"invalid resources of container {container.name}: {e}") from e
    resources = cri.LinuxContainerResources(
        cpu_shares=shares,
        memory_limit_in_bytes=memory_limit,
        oom_score_adj=oom_score_adj,
    )
    if settings.cpu_cfs_quota:
        period = settings.cpu_cfs_quota_period_us
        resources.cpu_quota = milli_cpu_to_quota(cpu_limit, period)
        resources.cpu_period = period
    if settings.cgroup_v2:
        if not settings.single_process_oom_kill:
            resources.unified[OOM_GROUP_FILE] = "1"
        try:
            resources.unified.update(container_swap(pod, container, settings.swap).unified)
        except (ValueError, ArithmeticError) as e:
            raise ContainerConfigError(
                f"invalid resources of container {container.name}: {e}"
            ) from e
    return resources


def seccomp_profile(
    pod: Pod, container: Container, settings: PodRuntimeSettings
) -> api.SecurityProfile:
    """The container's seccomp profile, as the kubelet's ``getSeccompProfile`` picks it."""
    csc, psc = container.security_context, pod.spec.security_context
    profile: SeccompProfile | None = None
    if csc is not None and csc.seccomp_profile is not None:
        profile = csc.seccomp_profile
    elif psc is not None and psc.seccomp_profile is not None:
        profile = psc.seccomp_profile
    if profile is None:
        if settings.seccomp_default:
            return api.SecurityProfile(profile_type=api.SecurityProfile.RuntimeDefault)
        return api.SecurityProfile(profile_type=api.SecurityProfile.Unconfined)
    if profile.type == "RuntimeDefault":
        return api.SecurityProfile(profile_type=api.SecurityProfile.RuntimeDefault)
    if profile.type == "Localhost":
        local = profile.localhost_profile or ""
        if not local:
            raise ContainerConfigError(
                "localhostProfile must be set if seccompProfile type is Localhost."
            )
        if local.startswith("/") or ".." in local.split("/"):
            raise ContainerConfigError(
                f"invalid localhostProfile {show_value(local)}: must be a relative path "
                "without '..'"
            )
        return api.SecurityProfile(
            profile_type=api.SecurityProfile.Localhost,
            localhost_ref=posixpath.join(settings.seccomp_profile_root, local),
        )
    return api.SecurityProfile(profile_type=api.SecurityProfile.Unconfined)


def verify_run_as_non_root(
    pod: Pod, container: Container, run_as_user: int | None, image_user: ImageUser
) -> None:
    """``runAsNonRoot`` without ``runAsUser``: the image's own user must not be root, as
    the kubelet's ``verifyRunAsNonRoot`` checks it."""
    if run_as_user is not None:
        return
    where = f'(pod: "{format_pod(pod)}", container: {container.name})'
    if image_user.uid is not None:
        if image_user.uid == 0:
            raise ContainerConfigError(
                f"container has runAsNonRoot and image will run as root {where}"
            )
        return
    if image_user.username:
        raise ContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user "
            f"({image_user.username}), cannot verify user is non-root {where}"
        )
    raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {where}")


def security_context(
    pod: Pod,
    container: Container,
    settings: PodRuntimeSettings,
    *,
    image_user: ImageUser | None = None,
    target_id: str = "",
) -> api.LinuxContainerSecurityContext:
    """``image_user``: who the image runs as (checked against ``runAsNonRoot``); None skips
    that check. ``target_id``: the container whose PID namespace an ephemeral container
    joins (``targetContainerName``); honoured only when the pod does not share one PID
    namespace already (pod or host), as the kubelet's ``NamespaceMode_TARGET``."""
    csc, psc = container.security_context, pod.spec.security_context
    namespaces = namespace_options(pod)
    if target_id and namespaces.pid == api.CONTAINER:
        namespaces.pid = api.TARGET
        namespaces.target_id = target_id
    out = api.LinuxContainerSecurityContext(
        namespace_options=namespaces,
        seccomp=seccomp_profile(pod, container, settings),
    )
    run_as_user = csc.run_as_user if csc and csc.run_as_user is not None else None
    if run_as_user is None and psc is not None:
        run_as_user = psc.run_as_user
    run_as_group = csc.run_as_group if csc and csc.run_as_group is not None else None
    if run_as_group is None and psc is not None:
        run_as_group = psc.run_as_group
    non_root = csc.run_as_non_root if csc and csc.run_as_non_root is not None else None
    if non_root is None and psc is not None:
        non_root = psc.run_as_non_root
    if non_root and run_as_user == 0:
        raise ContainerConfigError(
            f"container's runAsUser breaks non-root policy (pod: \"{pod.name}_{pod.namespace}"
            f'({pod.uid})", container: {container.name})'
        )
    if non_root and image_user is not None:
        verify_run_as_non_root(pod, container, run_as_user, image_user)
    if run_as_user is not None:
        out.run_as_user.value = run_as_user
    if run_as_group is not None:
        out.run_as_group.value = run_as_group
    if csc is not None:
        out.privileged = bool(csc.privileged)
        out.readonly_rootfs = bool(csc.read_only_root_filesystem)
        out.no_new_privs = csc.allow_privilege_escalation is False
        if csc.capabilities is not None:
            out.capabilities.add_capabilities.extend(csc.capabilities.add)
            out.capabilities.drop_capabilities.extend(csc.capabilities.drop)
    if psc is not None:
        if psc.fs_group is not None:
            out.supplemental_groups.append(psc.fs_group)
        out.supplemental_groups.extend(psc.supplemental_groups)
    out.masked_paths.extend(DEFAULT_MASKED_PATHS)
    out.readonly_paths.extend(DEFAULT_READONLY_PATHS)
    return out


def build_container_config(
    pod: Pod,
    container: Container,
    *,
    image_ref: str,
    restart_count: int,
    settings: PodRuntimeSettings,
    inputs: EnvInputs,
    mounts: Sequence[cri.Mount] = (),
    devices: Sequence[cri.Device] = (),
    image_user: ImageUser | None = None,
    target_id: str = "",
) -> cri.ContainerConfig:
    """Raises ``ContainerConfigError`` with the kubelet's message when the environment or the
    security context cannot be honoured. ``image_user``: the image's user from its
    ``ImageStatus`` (``runAsNonRoot`` is verified against it); ``target_id``: an ephemeral
    container's target (its PID namespace)."""
    log_path = container_log_path(container, restart_count)
    env = make_environment(pod, container, inputs)
    command, args = expand_command(container, env)
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=container.name, attempt=restart_count),
        image=cri.ImageSpec(image=image_ref, user_specified_image=container.image),
        command=command,
        args=args,
        working_dir=container.working_dir,
        envs=[cri.KeyValue(key=k, value=v.encode()) for k, v in env],
        mounts=list(mounts),
        devices=list(devices),
        labels=labels.container_labels(pod, container),
        annotations=labels.container_annotations(pod, container, restart_count),
        log_path=log_path,
        stdin=container.stdin,
        stdin_once=container.stdin_once,
        tty=container.tty,
        linux=cri.LinuxContainerConfig(
            resources=linux_resources(pod, container, settings),
            security_context=security_context(
                pod, container, settings, image_user=image_user, target_id=target_id
            ),
        ),
    )
