"""Which images need their pull credentials checked again (the kubelet's
``imagePullCredentialsVerificationPolicy``, gate ``KubeletEnsureSecretPulledImages``).

``NeverVerify``: an image on the node serves any pod. ``NeverVerifyPreloadedImages`` (the
default): only images the agent pulled itself are checked; images put on the node otherwise
serve any pod. ``NeverVerifyAllowlistedImages``: the images of
``preloadedImagesVerificationAllowlist`` (a repository, or a prefix ending in ``/*``) are never
checked, every other image is, whoever put it on the node. ``AlwaysVerify``: every image is
checked. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

NEVER_VERIFY: Final = "NeverVerify"
NEVER_VERIFY_PRELOADED: Final = "NeverVerifyPreloadedImages"
NEVER_VERIFY_ALLOWLISTED: Final = "NeverVerifyAllowlistedImages"
ALWAYS_VERIFY: Final = "AlwaysVerify"
POLICIES: Final = (NEVER_VERIFY, NEVER_VERIFY_PRELOADED, NEVER_VERIFY_ALLOWLISTED, ALWAYS_VERIFY)

_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN: Final = (
    r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
    r"(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
)
_REFERENCE: Final = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)

Enforcer = Callable[[str, bool], bool]
"""(image as the pod names it, pulled by the agent before) -> its credentials must be checked."""


def trim_tag_digest(image: str) -> str:
    """``image`` without its tag and digest, as written (not normalised); ValueError when it
    is not an image reference (the docker reference grammar)."""
    if len(image) > 255 + 128 + 80 or not _REFERENCE.fullmatch(image):
        raise ValueError("invalid reference format")
    name, _, _ = image.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def allowlist_pattern(pattern: str) -> tuple[str, bool]:
    """(normalised pattern, is a ``/*`` prefix); ValueError with the kubelet's words."""
    if pattern != pattern.strip():
        raise ValueError(f"leading/trailing spaces are not allowed: {pattern}")
    wildcard = pattern.endswith("/*")
    trimmed = pattern[:-1] if wildcard else pattern
    if not trimmed:
        raise ValueError(f"the supplied pattern is too short: {pattern}")
    if "*" in trimmed:
        raise ValueError(
            f"not a valid wildcard pattern, only patterns ending with '/*' are allowed: {pattern}"
        )
    if wildcard:
        if len(trimmed) == 1:
            raise ValueError("at least registry hostname is required")
        return trimmed, True
    try:
        bare = trim_tag_digest(trimmed)
    except ValueError as e:
        raise ValueError(f"failed to parse as an image name: {e}") from e
    if bare != trimmed:
        raise ValueError(f"neither tag nor digest is accepted in an image reference: {pattern}")
    return trimmed, False


def enforcer(policy: str, allowlist: Sequence[str] = ()) -> Enforcer:
    """The policy as a function; ValueError for an unknown policy or a bad pattern."""
    if policy == NEVER_VERIFY:
        return lambda image, pulled: False
    if policy == NEVER_VERIFY_PRELOADED:
        return lambda image, pulled: pulled
    if policy == ALWAYS_VERIFY:
        return lambda image, pulled: True
    if policy != NEVER_VERIFY_ALLOWLISTED:
        raise ValueError(f"unknown image pull credential verification policy: {policy}")
    exact: set[str] = set()
    prefixes: list[str] = []
    for pattern in allowlist:
        text, wildcard = allowlist_pattern(pattern)
        (prefixes.append if wildcard else exact.add)(text)

    def check(image: str, pulled: bool) -> bool:
        try:
            name = trim_tag_digest(image)
        except ValueError:
            name = image
        return not (name in exact or any(name.startswith(p) for p in prefixes))

    return check
