"""The operator's input is checked before any traffic, with kubeadm's rules and its words."""

from __future__ import annotations

import pytest

from nodeagent.join.token import JoinError, parse_pins, parse_token

HEX = "22c19c35ae6fa9a7006a8652c5a3494237e2508a29211461dcea62347ceb374c"


def test_a_token_splits_into_id_and_secret_and_hides_the_secret() -> None:
    token = parse_token("abcdef.0123456789abcdef")
    assert (token.token_id, token.secret) == ("abcdef", "0123456789abcdef")
    assert "0123456789abcdef" not in repr(token) + str(token)
    assert token.value == "abcdef.0123456789abcdef"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("abcdef0123456789abcdef", id="no dot"),
        pytest.param("ABCDEF.0123456789abcdef", id="upper case"),
        pytest.param("abcde.0123456789abcdef", id="short id"),
        pytest.param("abcdef.0123456789abcde", id="short secret"),
        pytest.param("abcdef.0123456789abcdef0", id="long secret"),
        pytest.param("abcdef.0123456789abcd_f", id="underscore"),
    ],
)
def test_a_malformed_token_is_refused_without_echoing_it(text: str) -> None:
    with pytest.raises(JoinError) as caught:
        parse_token(text)
    assert str(caught.value) == (
        "--token: the bootstrap token is not of the form '[a-z0-9]{6}.[a-z0-9]{16}'"
    )


def test_pins_are_lower_cased_and_deduplicated() -> None:
    assert parse_pins([f"sha256:{HEX}", f"SHA256:{HEX.upper()}"]) == frozenset({HEX})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            HEX,
            'invalid hash, expected "format:hex-value"; known format(s) are: sha256',
            id="no format",
        ),
        pytest.param(
            f"sha256:{HEX}:x",
            'invalid hash, expected "format:hex-value"; known format(s) are: sha256',
            id="two colons",
        ),
        pytest.param(
            f"md5:{HEX}", "unknown hash format 'md5'; known format(s) are: sha256", id="md5"
        ),
        pytest.param(
            f"sha256:{HEX[:-2]}", "expected a 32 byte SHA-256 hash, found 31 bytes", id="short"
        ),
        pytest.param(f"sha256:{HEX}0", "could not decode SHA-256 from hex", id="odd length"),
        pytest.param("sha256:" + "zz" * 32, "could not decode SHA-256 from hex", id="not hex"),
    ],
)
def test_a_malformed_pin_is_refused_with_kubeadms_reason(text: str, message: str) -> None:
    with pytest.raises(JoinError) as caught:
        parse_pins([text])
    assert str(caught.value) == f"--discovery-token-ca-cert-hash {text!r}: {message}"
