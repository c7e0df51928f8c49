"""The credential provider plugin configuration (``CredentialProviderConfig``): every problem
is reported at once, each naming the file and the field (``providers[0].matchImages``), with
the kubelet's ``validateCredentialProviderConfig`` words; a good file loads in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nodeagent.__main__ import check_credential_providers
from nodeagent.config import Config
from nodeagent.config.credentialproviders import ProviderConfigError, load_providers
from nodeagent.config.features import effective
from nodeagent.errors import ConfigError

V1 = "credentialprovider.kubelet.k8s.io/v1"
GATES = effective({})


def provider(**fields: Any) -> dict[str, Any]:
    good: dict[str, Any] = {
        "name": "ecr",
        "matchImages": ["*.dkr.ecr.*.amazonaws.com", "registry.example.com:5000/team"],
        "defaultCacheDuration": "12h",
        "apiVersion": V1,
    }
    good.update(fields)
    return {k: v for k, v in good.items() if v is not None}


def config(*providers: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1",
        "kind": "CredentialProviderConfig",
        "providers": list(providers),
        **top,
    }


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    plugins = tmp_path / "bin"
    plugins.mkdir()
    for name in ("ecr", "gcr", "tokens"):
        plugin = plugins / name
        plugin.write_text("#!/bin/sh\n")
        plugin.chmod(0o755)
    return plugins


def write(tmp_path: Path, doc: Any, name: str = "providers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def problems(path: Path, bin_dir: Path, gates: dict[str, bool] = GATES) -> list[tuple[str, str]]:
    with pytest.raises(ProviderConfigError) as caught:
        load_providers(str(path), str(bin_dir), gates)
    return list(caught.value.problems)


def test_a_good_file_loads_every_provider_in_order(tmp_path: Path, bin_dir: Path) -> None:
    tokens = {
        "serviceAccountTokenAudience": "registry.example.com",
        "cacheType": "ServiceAccount",
        "requireServiceAccount": True,
        "requiredServiceAccountAnnotationKeys": ["registry.example.com/role"],
        "optionalServiceAccountAnnotationKeys": ["registry.example.com/team"],
    }
    path = write(
        tmp_path,
        config(
            provider(args=["--region", "eu"], env=[{"name": "A", "value": "b"}]),
            provider(name="tokens", defaultCacheDuration="0s", tokenAttributes=tokens),
        ),
    )

    ecr, token_plugin = load_providers(str(path), str(bin_dir), GATES)

    assert ecr.binary == str(bin_dir / "ecr")
    assert ecr.default_cache_duration == 12 * 3600
    assert ecr.args == ("--region", "eu") and ecr.env == (("A", "b"),)
    assert token_plugin.token_attributes is not None
    assert token_plugin.token_attributes.required_annotation_keys == ("registry.example.com/role",)
    assert token_plugin.default_cache_duration == 0


def test_a_directory_is_read_file_by_file_in_lexical_order(tmp_path: Path, bin_dir: Path) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    write(conf, config(provider(name="gcr")), "20-gcr.json")
    write(conf, config(provider()), "10-ecr.yaml")
    write(conf, "ignored: not a config", "README.md")
    found = load_providers(str(conf), str(bin_dir), GATES)
    assert [p.name for p in found] == ["ecr", "gcr"]


def test_a_name_twice_across_files_names_the_second_file(tmp_path: Path, bin_dir: Path) -> None:
    conf = tmp_path / "conf.d"
    conf.mkdir()
    write(conf, config(provider()), "a.yaml")
    second = write(conf, config(provider()), "b.yaml")
    assert problems(conf, bin_dir) == [(f"{second}: providers[1].name", "Duplicate value: 'ecr'")]


@pytest.mark.parametrize(
    ("fields", "where", "message"),
    [
        pytest.param({"name": None}, "providers[0].name", "Required value", id="no name"),
        pytest.param(
            {"name": "a/b"},
            "providers[0].name",
            "Invalid value: 'a/b': provider name cannot contain '/'",
            id="slash",
        ),
        pytest.param(
            {"name": "a b"},
            "providers[0].name",
            "Invalid value: 'a b': provider name cannot contain spaces",
            id="space",
        ),
        pytest.param(
            {"name": ".."},
            "providers[0].name",
            "Invalid value: '..': provider name cannot be '..'",
            id="dot dot",
        ),
        pytest.param(
            {"name": "missing"},
            "providers[0].name",
            "plugin binary executable BIN/missing did not exist",
            id="no such plugin",
        ),
        pytest.param(
            {"apiVersion": None}, "providers[0].apiVersion", "Required value", id="no apiVersion"
        ),
        pytest.param(
            {"apiVersion": "credentialprovider.kubelet.k8s.io/v2"},
            "providers[0].apiVersion",
            'Unsupported value: "credentialprovider.kubelet.k8s.io/v2": supported values: '
            '"credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", '
            '"credentialprovider.kubelet.k8s.io/v1beta1"',
            id="unknown apiVersion",
        ),
        pytest.param(
            {"matchImages": []},
            "providers[0].matchImages",
            "Required value: at least 1 item in matchImages is required",
            id="no matchImages",
        ),
        pytest.param(
            {"matchImages": ["bad host.example.com"]},
            "providers[0].matchImages",
            "Invalid value: 'bad host.example.com': match image is invalid: invalid character "
            "in host name 'bad host.example.com'",
            id="bad matchImages",
        ),
        pytest.param(
            {"defaultCacheDuration": None},
            "providers[0].defaultCacheDuration",
            "Required value",
            id="no defaultCacheDuration",
        ),
        pytest.param(
            {"defaultCacheDuration": "1d"},
            "providers[0].defaultCacheDuration",
            "Invalid value: '1d': \"1d\" is not a duration such as 300ms, 10s, 1m30s or 2h "
            "(units ns, us, ms, s, m, h)",
            id="days are not a Go unit",
        ),
        pytest.param(
            {"defaultCacheDuration": "-1m"},
            "providers[0].defaultCacheDuration",
            "Invalid value: '-1m': must be greater than or equal to 0",
            id="negative",
        ),
        pytest.param(
            {"args": "--flag"}, "providers[0].args", "must be a list of strings", id="args"
        ),
        pytest.param(
            {"env": [{"value": "x"}]},
            "providers[0].env[0]",
            "must be {name: ..., value: ...}",
            id="env without a name",
        ),
        pytest.param({"match": ["x"]}, "providers[0].match", "unknown field", id="typo"),
    ],
)
def test_each_provider_field_is_checked_and_named(
    tmp_path: Path, bin_dir: Path, fields: dict[str, Any], where: str, message: str
) -> None:
    path = write(tmp_path, config(provider(**fields)))
    found = problems(path, bin_dir)
    assert (f"{path}: {where}", message.replace("BIN", str(bin_dir))) in found
    assert all(w.startswith(f"{path}: providers[0].") for w, _ in found), found


TOKENS = {
    "serviceAccountTokenAudience": "registry.example.com",
    "cacheType": "Token",
    "requireServiceAccount": True,
}


@pytest.mark.parametrize(
    ("fields", "where", "message"),
    [
        pytest.param(
            {"serviceAccountTokenAudience": ""},
            "serviceAccountTokenAudience",
            "Required value",
            id="no audience",
        ),
        pytest.param(
            {"requireServiceAccount": None},
            "requireServiceAccount",
            "Required value (true or false)",
            id="requireServiceAccount unset",
        ),
        pytest.param(
            {"cacheType": None},
            "cacheType",
            "cacheType is required to be set when tokenAttributes is specified. Supported "
            "values are: ServiceAccount, Token",
            id="no cacheType",
        ),
        pytest.param(
            {"cacheType": "Image"},
            "cacheType",
            'Unsupported value: "Image": supported values: "ServiceAccount", "Token"',
            id="unknown cacheType",
        ),
        pytest.param(
            {"requireServiceAccount": False, "requiredServiceAccountAnnotationKeys": ["a.io/b"]},
            "requiredServiceAccountAnnotationKeys",
            "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys "
            "is set",
            id="required keys without a required account",
        ),
        pytest.param(
            {"optionalServiceAccountAnnotationKeys": ["-bad-/key"]},
            "optionalServiceAccountAnnotationKeys",
            "Invalid value: '-bad-/key': not a qualified name",
            id="not a qualified name",
        ),
        pytest.param(
            {"optionalServiceAccountAnnotationKeys": ["a.io/b", "a.io/b"]},
            "optionalServiceAccountAnnotationKeys",
            "Duplicate value: 'a.io/b'",
            id="a key twice",
        ),
        pytest.param(
            {
                "requiredServiceAccountAnnotationKeys": ["a.io/b"],
                "optionalServiceAccountAnnotationKeys": ["a.io/b"],
            },
            "",
            "Invalid value: ['a.io/b']: annotation keys cannot be both required and optional",
            id="required and optional",
        ),
        pytest.param({"audience": "x"}, "audience", "unknown field", id="typo"),
    ],
)
def test_each_token_attribute_is_checked_and_named(
    tmp_path: Path, bin_dir: Path, fields: dict[str, Any], where: str, message: str
) -> None:
    attributes = {k: v for k, v in {**TOKENS, **fields}.items() if v is not None}
    path = write(tmp_path, config(provider(name="tokens", tokenAttributes=attributes)))
    field = "providers[0].tokenAttributes" + (f".{where}" if where else "")
    assert problems(path, bin_dir) == [(f"{path}: {field}", message)]


def test_token_attributes_need_the_v1_protocol_and_the_gate(tmp_path: Path, bin_dir: Path) -> None:
    old = provider(name="tokens", apiVersion=f"{V1}beta1", tokenAttributes=TOKENS)
    path = write(tmp_path, config(old))
    gates = {**GATES, "KubeletServiceAccountTokenForCredentialProviders": False}
    assert problems(path, bin_dir, gates) == [
        (
            f"{path}: providers[0].tokenAttributes",
            "tokenAttributes is not supported when "
            "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
        ),
        (
            f"{path}: providers[0].tokenAttributes",
            f"tokenAttributes is only supported for {V1} API version",
        ),
    ]


@pytest.mark.parametrize(
    ("doc", "where", "message"),
    [
        pytest.param("providers: [", "", "not YAML or JSON", id="not YAML"),
        pytest.param("[]", "", "must be a CredentialProviderConfig mapping", id="a list"),
        pytest.param(
            config(provider(), kind="KubeletConfiguration"),
            "kind",
            "must be CredentialProviderConfig, got 'KubeletConfiguration'",
            id="kind",
        ),
        pytest.param(
            config(provider(), apiVersion="v1"),
            "apiVersion",
            "'v1' is not one of kubelet.config.k8s.io/v1, kubelet.config.k8s.io/v1beta1, "
            "kubelet.config.k8s.io/v1alpha1",
            id="apiVersion",
        ),
        pytest.param(config(provider(), extra=1), "extra", "unknown field", id="unknown field"),
        pytest.param(
            config(provider(), providers={"a": 1}), "providers", "must be a list", id="not a list"
        ),
    ],
)
def test_the_document_itself_is_checked_and_named(
    tmp_path: Path, bin_dir: Path, doc: Any, where: str, message: str
) -> None:
    path = write(tmp_path, doc)
    [(found_where, found_message)] = problems(path, bin_dir)
    assert found_where == (f"{path}: {where}" if where else str(path))
    assert found_message.startswith(message)


def test_every_problem_is_reported_together(tmp_path: Path, bin_dir: Path) -> None:
    path = write(
        tmp_path,
        config(
            provider(name="a b", defaultCacheDuration=None),
            provider(name="gcr", matchImages=[], apiVersion=None),
        ),
    )
    wheres = [where for where, _ in problems(path, bin_dir)]
    assert wheres == [
        f"{path}: providers[0].name",
        f"{path}: providers[0].defaultCacheDuration",
        f"{path}: providers[0].name",  # "a b" is no file in the bin dir
        f"{path}: providers[1].apiVersion",
        f"{path}: providers[1].matchImages",
    ]


def test_missing_paths_and_empty_configs_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    assert problems(missing, tmp_path / "nobin") == [
        (str(tmp_path / "nobin"), "plugin binary directory did not exist"),
        (str(missing), "unable to access path"),
    ]
    empty = write(tmp_path, config())
    assert problems(empty, tmp_path) == [
        (str(empty), "providers: Required value: at least 1 item in plugins is required")
    ]
    (tmp_path / "empty.d").mkdir()
    assert problems(tmp_path / "empty.d", tmp_path) == [
        (str(tmp_path / "empty.d"), "no configuration files found in directory")
    ]


def test_the_daemon_refuses_to_start_naming_the_setting_the_file_and_the_field(
    tmp_path: Path, bin_dir: Path
) -> None:
    path = write(tmp_path, config(provider(matchImages=[]), provider(name="gcr", name2=1)))
    base = Config()
    cfg = msgspec.structs.replace(
        base,
        node=msgspec.structs.replace(
            base.node,
            image_credential_provider_config_path=str(path),
            image_credential_provider_bin_dir=str(bin_dir),
        ),
    )
    with pytest.raises(ConfigError) as caught:
        check_credential_providers(cfg)
    errors = [caught.value, *caught.value.more]
    assert [e.path for e in errors] == ["node.imageCredentialProviderConfigPath"] * 2
    assert errors[0].message == (
        f"{path}: providers[0].matchImages: Required value: at least 1 item in matchImages "
        "is required"
    )
    assert errors[1].message == f"{path}: providers[1].name2: unknown field"
