"""Which ConfigMaps and Secrets a pod reads from the API (the kubelet's
``VisitPodConfigmapNames`` / ``VisitPodSecretNames``): its containers' environments (``env``
``valueFrom`` and ``envFrom``, of init, regular and ephemeral containers) and its volumes
(``configMap``, ``secret`` and the sources of a ``projected`` volume). Pure.
"""

from __future__ import annotations

from nodeagent.podspec.types import Pod, Volume


def referenced_objects(pod: Pod) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets the containers' environments read."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for container in (
        *pod.spec.init_containers,
        *pod.spec.containers,
        *pod.spec.ephemeral_containers,
    ):
        for source in container.env_from:
            if source.config_map_ref is not None:
                config_maps.add(source.config_map_ref.name)
            if source.secret_ref is not None:
                secrets.add(source.secret_ref.name)
        for var in container.env:
            if var.value_from is not None:
                if var.value_from.config_map_key_ref is not None:
                    config_maps.add(var.value_from.config_map_key_ref.name)
                if var.value_from.secret_key_ref is not None:
                    secrets.add(var.value_from.secret_key_ref.name)
    return config_maps, secrets


def volume_objects(volume: Volume) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets a volume's content is made of."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    if volume.config_map is not None:
        config_maps.add(volume.config_map.name)
    if volume.secret is not None:
        secrets.add(volume.secret.secret_name)
    if volume.projected is not None:
        for source in volume.projected.sources:
            if source.config_map is not None:
                config_maps.add(source.config_map.name)
            if source.secret is not None:
                secrets.add(source.secret.name)
    return config_maps, secrets


def config_map_names(pod: Pod) -> frozenset[str]:
    """Every ConfigMap the pod reads."""
    names = referenced_objects(pod)[0]
    for volume in pod.spec.volumes:
        names |= volume_objects(volume)[0]
    return frozenset(names)


def secret_names(pod: Pod) -> frozenset[str]:
    """Every Secret the pod reads."""
    names = referenced_objects(pod)[1]
    for volume in pod.spec.volumes:
        names |= volume_objects(volume)[1]
    return frozenset(names)
