"""HTTP to the serving pods' engines: what controller.execute calls to load and unload LoRA adapters while they
serve, and what reads the adapters each replica serves (``GET /v1/models``), through the :class:`EngineClient`
protocol that :class:`EngineHttp` implements (aiohttp, which kopf brings)."""

from __future__ import annotations

from typing import Any, Protocol

import aiohttp

TIMEOUT = 120.0
"""Seconds for one call: an unload waits for the requests using the adapter (runners/common/lora_updates.py)."""


class EngineClient(Protocol):
    async def post(self, url: str, body: dict[str, Any]) -> tuple[int, str]:
        """POST ``body`` as JSON; (HTTP status, reply text)."""
        ...

    async def get_json(self, url: str) -> Any:
        """GET and decode a JSON reply (raises on a non-2xx answer)."""
        ...


CONNECT_TIMEOUT = 3.0
"""Seconds to connect: a pod address that does not route (a NetworkPolicy, a node gone) fails fast."""


class EngineHttp:
    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, CONNECT_TIMEOUT))

    async def post(self, url: str, body: dict[str, Any]) -> tuple[int, str]:
        async with aiohttp.ClientSession(timeout=self.timeout) as session, session.post(url, json=body) as r:
            return r.status, await r.text()

    async def get_json(self, url: str) -> Any:
        async with aiohttp.ClientSession(timeout=self.timeout) as session, session.get(url) as r:
            r.raise_for_status()
            return await r.json(content_type=None)
