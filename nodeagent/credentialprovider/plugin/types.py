"""A credential provider plugin as the configuration names it (``CredentialProvider`` of
``CredentialProviderConfig``), after its file was read and checked by
``nodeagent.config.credentialproviders``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenAttributes:
    audience: str
    cache_type: str
    require_service_account: bool
    required_annotation_keys: tuple[str, ...] = ()
    optional_annotation_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    binary: str
    match_images: tuple[str, ...]
    default_cache_duration: float
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    token_attributes: TokenAttributes | None = None
