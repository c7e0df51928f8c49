"""Keys shared by the server's modules (the AppKeys live next to their types)."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from nodeagent.server.auth import User

USER: Final = web.RequestKey("nodeagent.server.user", User)
"""Request key: the authenticated user."""
