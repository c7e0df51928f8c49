"""Decoding a Pod's JSON, once, at the API edge: :func:`decode_pod` gives the frozen structs of
:mod:`.types` with the agent's identity checks; :func:`decode_checked_pod` (what every pod the
agent runs goes through) also checks every quantity, naming the field of a bad one. A volume's
sources the agent does not set up are kept raw under ``other``, so the volume manager can
refuse them by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from nodeagent.podspec.types import SUPPORTED_VOLUME_SOURCES, Pod
from nodeagent.podspec.validation import (
    check_identity,
    check_quantities,
    check_quantity,
    raw_quantities,
)


def _keep_other_volume_sources(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with each volume's unrecognised sources copied under ``other``."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    volumes = spec.get("volumes")
    if not isinstance(volumes, list) or not volumes:
        return obj
    kept = []
    for volume in volumes:
        other = (
            {k: v for k, v in volume.items() if k not in ("name", *SUPPORTED_VOLUME_SOURCES)}
            if isinstance(volume, dict)
            else {}
        )
        kept.append({**volume, "other": other} if other else volume)
    return {**obj, "spec": {**spec, "volumes": kept}}


def decode_pod(obj: dict[str, Any]) -> Pod:
    """A Pod from its JSON; raises ``msgspec.ValidationError`` naming the bad field
    (:class:`PodSpecError` for a name, UID or ``hostIP`` the agent refuses)."""
    pod = msgspec.convert(_keep_other_volume_sources(obj), Pod, strict=False)
    check_identity(pod)
    return pod


def decode_checked_pod(obj: Mapping[str, Any]) -> Pod:
    """A Pod from its JSON with every quantity checked; raises ``msgspec.ValidationError``
    (:class:`PodSpecError` for what the agent itself refuses) naming the bad field."""
    for field, raw in raw_quantities(obj):
        check_quantity(field, raw)
    pod = decode_pod(dict(obj))
    check_quantities(pod)
    return pod
