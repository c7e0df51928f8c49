"""Decoding a pod for the agent to run: :func:`nodeagent.podspec.decode_pod` plus every quantity.

Quantities are checked when the pod is decoded, with the apiserver's wording
(``spec.containers[0].resources.limits.memory: Invalid value: "1Gi2": quantities must match the
regular expression ...``), so admission, QoS and the container builder never meet one they
cannot parse. A separate module because ``podspec`` and ``quantity`` are independent layers.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from nodeagent.podspec import Pod, PodSpecError, decode_pod, invalid
from nodeagent.quantity import parse_quantity

QUANTITY_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
QUANTITY_MAX_CHARS: Final = 64


def check_quantity(field: str, raw: object) -> None:
    """Raise :class:`PodSpecError` unless ``raw`` is a quantity the agent can compute with."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise invalid(field, raw, QUANTITY_MESSAGE)
    if isinstance(raw, str) and len(raw) > QUANTITY_MAX_CHARS:
        raise invalid(field, raw, QUANTITY_MESSAGE)
    try:
        parse_quantity(raw)
    except (ValueError, ArithmeticError) as e:  # OverflowError, ZeroDivisionError: both
        raise invalid(field, raw, QUANTITY_MESSAGE) from e


def _quantities(pod: Pod) -> Iterator[tuple[str, object]]:
    for key, containers in (
        ("initContainers", pod.spec.init_containers),
        ("containers", pod.spec.containers),
        ("ephemeralContainers", pod.spec.ephemeral_containers),
    ):
        for i, container in enumerate(containers):
            where = f"spec.{key}[{i}]"
            for kind, values in (
                ("limits", container.resources.limits),
                ("requests", container.resources.requests),
            ):
                for name, raw in values.items():
                    yield f"{where}.resources.{kind}.{name}", raw
            for j, var in enumerate(container.env):
                ref = var.value_from.resource_field_ref if var.value_from else None
                if ref is not None and ref.divisor not in (None, ""):
                    yield f"{where}.env[{j}].valueFrom.resourceFieldRef.divisor", ref.divisor
    for name, raw in pod.spec.overhead.items():
        yield f"spec.overhead.{name}", raw
    for i, volume in enumerate(pod.spec.volumes):
        if volume.empty_dir is not None and volume.empty_dir.size_limit not in (None, ""):
            yield f"spec.volumes[{i}].emptyDir.sizeLimit", volume.empty_dir.size_limit


def check_quantities(pod: Pod) -> None:
    for field, raw in _quantities(pod):
        check_quantity(field, raw)


def _raw_quantities(obj: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """The quantity maps of the raw JSON, so a value of the wrong type is named by its key
    (msgspec alone would say ``limits[...]``)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return
    for key in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if isinstance(values, Mapping):
                    for name, raw in values.items():
                        yield f"spec.{key}[{i}].resources.{kind}.{name}", raw
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        for name, raw in overhead.items():
            yield f"spec.overhead.{name}", raw


def decode_checked_pod(obj: Mapping[str, Any]) -> Pod:
    """A Pod from its JSON with every quantity checked; raises ``msgspec.ValidationError``
    (:class:`PodSpecError` for what the agent itself refuses) naming the bad field."""
    for field, raw in _raw_quantities(obj):
        check_quantity(field, raw)
    pod = decode_pod(dict(obj))
    check_quantities(pod)
    return pod


__all__ = ["PodSpecError", "check_quantities", "check_quantity", "decode_checked_pod"]
