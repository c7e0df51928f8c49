"""The four ``imagePullCredentialsVerificationPolicy`` values and
``preloadedImagesVerificationAllowlist``, as the kubelet's ``image_pull_policies.go``."""

from __future__ import annotations

import re

import pytest

from nodeagent.credentialprovider import pullpolicy

IMAGES = [
    "registry.example.com/base/os:1",
    "registry.example.com/base/os@sha256:" + "d" * 64,
    "registry.example.com/team/app:2",
    "busybox",
]


@pytest.mark.parametrize(
    ("policy", "allowlist", "pulled", "checked"),
    [
        pytest.param("NeverVerify", (), True, [False] * 4, id="NeverVerify pulled"),
        pytest.param("NeverVerify", (), False, [False] * 4, id="NeverVerify preloaded"),
        pytest.param("AlwaysVerify", (), True, [True] * 4, id="AlwaysVerify pulled"),
        pytest.param("AlwaysVerify", (), False, [True] * 4, id="AlwaysVerify preloaded"),
        pytest.param(
            "NeverVerifyPreloadedImages", (), True, [True] * 4, id="default: pulled by the agent"
        ),
        pytest.param("NeverVerifyPreloadedImages", (), False, [False] * 4, id="default: preloaded"),
        pytest.param(
            "NeverVerifyAllowlistedImages",
            ("registry.example.com/base/os",),
            False,
            [False, False, True, True],
            id="allowlisted repository, preloaded or not the others are checked",
        ),
        pytest.param(
            "NeverVerifyAllowlistedImages",
            ("registry.example.com/base/os",),
            True,
            [False, False, True, True],
            id="allowlisted repository pulled by the agent",
        ),
        pytest.param(
            "NeverVerifyAllowlistedImages",
            ("registry.example.com/*",),
            True,
            [False, False, False, True],
            id="allowlisted registry prefix",
        ),
        pytest.param(
            "NeverVerifyAllowlistedImages",
            ("registry.example.com/ba/*",),
            False,
            [True, True, True, True],
            id="a prefix matches whole path parts only as written",
        ),
        pytest.param("NeverVerifyAllowlistedImages", (), False, [True] * 4, id="empty allowlist"),
    ],
)
def test_which_images_need_their_credentials_checked(
    policy: str, allowlist: tuple[str, ...], pulled: bool, checked: list[bool]
) -> None:
    enforce = pullpolicy.enforcer(policy, allowlist)
    assert [enforce(image, pulled) for image in IMAGES] == checked


def test_an_unknown_policy_is_refused_with_the_kubelets_words() -> None:
    with pytest.raises(ValueError, match="unknown image pull credential verification policy: X"):
        pullpolicy.enforcer("X")


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        (" registry.example.com/a", "leading/trailing spaces are not allowed"),
        ("", "the supplied pattern is too short"),
        ("*", "only patterns ending with '/*' are allowed"),
        ("/*", "at least registry hostname is required"),
        ("registry.example.com/*/app", "only patterns ending with '/*' are allowed"),
        ("registry.example.com/app*", "only patterns ending with '/*' are allowed"),
        ("registry.example.com/app:1", "neither tag nor digest is accepted"),
        ("registry.example.com/App", "failed to parse as an image name"),
    ],
)
def test_bad_allowlist_patterns_are_refused_with_the_kubelets_words(
    pattern: str, error: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        pullpolicy.enforcer("NeverVerifyAllowlistedImages", [pattern])


@pytest.mark.parametrize(
    ("image", "bare"),
    [
        ("busybox", "busybox"),
        ("busybox:1.36", "busybox"),
        ("127.0.0.1:5000/private/busybox:1", "127.0.0.1:5000/private/busybox"),
        ("127.0.0.1:5000/private/busybox", "127.0.0.1:5000/private/busybox"),
        (f"r.example.com/a@sha256:{'e' * 64}", "r.example.com/a"),
        (f"r.example.com/a:1@sha256:{'e' * 64}", "r.example.com/a"),
        ("docker.io/library/busybox:latest", "docker.io/library/busybox"),
    ],
)
def test_records_key_images_as_written_without_tag_or_digest(image: str, bare: str) -> None:
    assert pullpolicy.trim_tag_digest(image) == bare
