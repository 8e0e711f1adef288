"""The chat-completions POST over aiohttp directly, raising what the OpenAI SDK raises.

Stage 03 asks one endpoint hundreds of thousands of times. Through the SDK every call builds an
httpx request (URL parsing, header models, options copies) and wraps aiohttp in an httpx transport;
that machinery, not the network, was most of the client's CPU per answer against a local server.
`RawChatClient` sends the same JSON to the same URL with the same authentication headers and hands
back the parsed body, so the engine's hot path touches no SDK object.

Everything the engine reads from a failure stays as the SDK makes it: a non-2xx answer raises the
SDK's own status error (built by the SDK from the response, so the class, `message`, `body` and the
Retry-After headers are the SDK's), a transport error raises `openai.APITimeoutError` or
`openai.APIConnectionError` over the same chain of causes as the SDK's aiohttp transport (its
exception map is mirrored in `_TRANSPORT_ERRORS`), a 2xx body is parsed as the SDK parses a
`cast_to=dict` answer (JSON when the content type says so, else the text). The SDK is imported only
when an error has to be built. `tests/llm/test_raw_client.py` runs both clients against one seeded
faulty server and compares what the store holds.
"""
from __future__ import annotations

import json
import os

import aiohttp

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_CONNECTIONS = 1000  # the SDK's DEFAULT_CONNECTION_LIMITS.max_connections


def _httpx():
    """The httpx the SDK is built on (imported with the SDK, only when an error is built)."""
    from openai._base_client import httpx2

    return httpx2


def _transport_error_class(exc: BaseException):
    """The httpx exception the SDK's aiohttp transport maps `exc` to (the most specific match of its
    map), or None when it lets `exc` through unchanged."""
    httpx = _httpx()
    table = [
        (aiohttp.ServerTimeoutError, httpx.TimeoutException),
        (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
        (aiohttp.ClientConnectionError, httpx.ConnectTimeout),
        (aiohttp.ClientConnectorError, httpx.ConnectError),
        (aiohttp.ClientPayloadError, httpx.ReadError),
        (aiohttp.ClientProxyConnectionError, httpx.ProxyError),
        (aiohttp.ClientHttpProxyError, httpx.ProxyError),
        (aiohttp.client_exceptions.NonHttpUrlClientError, httpx.UnsupportedProtocol),
        (aiohttp.client_exceptions.InvalidUrlClientError, httpx.UnsupportedProtocol),
    ]
    mapped = None
    for source, target in table:
        if isinstance(exc, source) and (mapped is None or issubclass(target, mapped)):
            mapped = target
    return mapped


class RawChatClient:
    """`post` / `get` / `close` as the engine calls them on `AsyncOpenAI`, over one aiohttp connection pool."""

    def __init__(self, api_key: str, base_url: str | None, timeout_s: float, environ=None):
        env = os.environ if environ is None else environ
        self.base_url = (base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                        "Accept": "application/json"}
        # the SDK sends these when the environment sets them, whatever the endpoint
        for var, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if env.get(var):
                self.headers[header] = env[var]
        self._pool: aiohttp.ClientSession | None = None
        self._error_builder = None

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        """The SDK's one timeout applied as its transport applies it: connect, read and pool."""
        return aiohttp.ClientTimeout(sock_connect=seconds, sock_read=seconds, connect=seconds)

    def pool(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running loop."""
        if self._pool is None:
            self._pool = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS))
        return self._pool

    async def post(self, path: str, *, body: dict, cast_to=dict, options: dict | None = None):
        return await self._request("POST", path, json.dumps(body).encode("utf-8"), options)

    async def get(self, path: str, *, cast_to=dict, options: dict | None = None):
        return await self._request("GET", path, None, options)

    async def _request(self, method: str, path: str, data: bytes | None, options: dict | None):
        """One request: the parsed 2xx body, else the SDK's exception for what happened."""
        url = self.base_url + path
        timeout = self._timeout((options or {}).get("timeout", self.timeout_s))
        try:
            async with self.pool().request(method, url, data=data, headers=self.headers, timeout=timeout,
                                              auto_decompress=True) as resp:
                status, raw = resp.status, await resp.read()
                headers, charset = resp.raw_headers, resp.charset
                content_type = resp.headers.get("content-type", "*")
        except (aiohttp.ClientError, OSError) as exc:
            error = self._transport_error(exc, method, url)
            if error is None:  # the SDK lets it through unwrapped too
                raise
            raise error  # noqa: B904 -- its causes are set as the SDK sets them
        if not 200 <= status < 300:
            raise self._status_error(method, url, status, headers, raw)
        text_type = not content_type.split(";")[0].endswith("json")
        if text_type:
            return raw.decode(charset or "utf-8", errors="replace")
        return json.loads(raw)

    def _transport_error(self, exc: BaseException, method: str, url: str) -> Exception | None:
        """APITimeoutError / APIConnectionError over the httpx error the SDK's transport maps `exc` to
        (an SSL error unwrapped: APIConnectionError over it), or None where the SDK lets `exc` through."""
        import ssl

        import openai

        httpx = _httpx()
        request = httpx.Request(method, url)
        mapped_class = _transport_error_class(exc)
        if mapped_class is None and not isinstance(exc, ssl.SSLError):
            return None
        inner: BaseException = exc
        if mapped_class is not None:
            inner = mapped_class(str(exc))
            inner.__cause__ = exc
        outer = (openai.APITimeoutError(request=request) if isinstance(inner, httpx.TimeoutException)
                 else openai.APIConnectionError(request=request))
        outer.__cause__ = inner
        return outer

    def _status_error(self, method: str, url: str, status: int, headers, raw: bytes) -> Exception:
        """The SDK's status error, built by the SDK from the response it would have read."""
        httpx = _httpx()
        response = httpx.Response(status, headers=headers, content=raw, request=httpx.Request(method, url))
        return self._sdk_client()._make_status_error_from_response(response)

    def _sdk_client(self):
        """An SDK client used only to build status errors exactly as the SDK does (made once)."""
        if self._error_builder is None:
            from openai import AsyncOpenAI

            self._error_builder = AsyncOpenAI(api_key="unused", base_url=self.base_url, max_retries=0)
        return self._error_builder

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
