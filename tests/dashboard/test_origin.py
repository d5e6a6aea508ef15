"""The socket Origin check: scheme, host and port must all match the site (or a trusted origin).

Unit tests call ``origin_allowed`` on handshake scopes; the ASGI tests go through the
validator and the real application, where a refused handshake is a plain 403 (never a
500, never reaching a consumer).
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.testing import WebsocketCommunicator

from dashboard.access.origin import SiteOriginValidator, origin_allowed
from dashboard.asgi import application
from dashboard.routing import live_path


def _scope(
    origin: str | None,
    host: str | None = "127.0.0.1:8000",
    *,
    scheme: str = "ws",
    extra: list[tuple[bytes, bytes]] | None = None,
    server: tuple[str, int] | None = None,
) -> dict[str, Any]:
    headers: list[tuple[bytes, bytes]] = []
    if host is not None:
        headers.append((b"host", host.encode("latin1")))
    if origin is not None:
        headers.append((b"origin", origin.encode("latin1")))
    scope: dict[str, Any] = {
        "type": "websocket",
        "path": "/ws/overview/",
        "scheme": scheme,
        "headers": headers + (extra or []),
    }
    if server is not None:
        scope["server"] = server
    return scope


@pytest.fixture
def site(settings: Any) -> Any:
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "console.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.DEBUG = False
    return settings


class SameOriginTests:
    def test_exact_site_origin_is_allowed(self, site: Any) -> None:
        assert origin_allowed(_scope("http://127.0.0.1:8000"))

    def test_case_of_scheme_and_host_does_not_matter(self, site: Any) -> None:
        assert origin_allowed(_scope("HTTP://127.0.0.1:8000", host="127.0.0.1:8000"))
        assert origin_allowed(_scope("http://localhost:8000", host="LOCALHOST:8000"))

    @pytest.mark.parametrize(
        "origin",
        [
            "http://127.0.0.1:9999",  # other port
            "http://127.0.0.1",  # port 80 is another origin
            "https://127.0.0.1",  # other scheme (and port 443)
            "https://127.0.0.1:8000",  # other scheme, same port
            "http://localhost:8000",  # an allowed host, but not the one serving this page
            "http://evil.example:8000",
            "ws://127.0.0.1:8000",  # not a page origin
            "null",  # sandboxed frames and file:// pages
            "",
            "http://[",  # unparsable
            "http://127.0.0.1:99999",  # port out of range
        ],
    )
    def test_other_origins_are_refused(self, site: Any, origin: str) -> None:
        assert not origin_allowed(_scope(origin))

    def test_missing_origin_is_refused(self, site: Any) -> None:
        assert not origin_allowed(_scope(None))

    def test_default_ports_are_the_same_origin(self, site: Any) -> None:
        assert origin_allowed(_scope("http://console.example.com", host="console.example.com"))
        assert origin_allowed(_scope("http://console.example.com:80", host="console.example.com"))
        assert origin_allowed(
            _scope("https://console.example.com", host="console.example.com:443", scheme="wss")
        )

    def test_secure_socket_needs_the_https_origin(self, site: Any) -> None:
        host = "console.example.com"
        assert origin_allowed(_scope("https://console.example.com", host=host, scheme="wss"))
        assert not origin_allowed(_scope("http://console.example.com", host=host, scheme="wss"))
        assert not origin_allowed(_scope("https://console.example.com", host=host, scheme="ws"))

    def test_host_outside_allowed_hosts_is_refused_even_if_origin_matches(self, site: Any) -> None:
        # DNS rebinding: a page on evil.example that resolves to us sends a matching pair.
        assert not origin_allowed(_scope("http://evil.example:8000", host="evil.example:8000"))

    def test_without_host_header_the_server_address_is_the_host(self, site: Any) -> None:
        scope = _scope("http://127.0.0.1:8000", host=None, server=("127.0.0.1", 8000))
        assert origin_allowed(scope)
        assert not origin_allowed(_scope("http://127.0.0.1:8000", host=None))

    def test_ipv6_host(self, site: Any) -> None:
        site.ALLOWED_HOSTS = ["[::1]"]
        assert origin_allowed(_scope("http://[::1]:8000", host="[::1]:8000"))
        assert not origin_allowed(_scope("http://[::1]:8001", host="[::1]:8000"))


class ProxyTests:
    FORWARDED_HTTPS = [(b"x-forwarded-proto", b"https")]

    def test_forwarded_proto_counts_only_when_the_proxy_header_is_configured(
        self, site: Any
    ) -> None:
        host = "console.example.com"
        forwarded = _scope("https://console.example.com", host=host, extra=self.FORWARDED_HTTPS)
        assert not origin_allowed(forwarded), "a client cannot claim https by itself"
        site.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
        assert origin_allowed(forwarded)
        plain = _scope("http://console.example.com", host=host, extra=self.FORWARDED_HTTPS)
        assert not origin_allowed(plain)

    def test_proxy_saying_http_means_http(self, site: Any) -> None:
        site.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
        extra = [(b"x-forwarded-proto", b"http")]
        host = "console.example.com"
        assert origin_allowed(_scope("http://console.example.com", host=host, extra=extra))
        assert not origin_allowed(_scope("https://console.example.com", host=host, extra=extra))


class TrustedOriginTests:
    def test_trusted_origin_is_allowed_with_its_exact_scheme_and_port(self, site: Any) -> None:
        site.CSRF_TRUSTED_ORIGINS = ["https://console.example.com"]
        # e.g. a TLS proxy in front that does not forward the scheme
        assert origin_allowed(_scope("https://console.example.com", host="127.0.0.1:8000"))
        assert not origin_allowed(_scope("http://console.example.com", host="127.0.0.1:8000"))
        assert not origin_allowed(_scope("https://console.example.com:8443", host="127.0.0.1:8000"))

    def test_wildcard_trusted_origin_covers_subdomains_only_on_its_scheme(self, site: Any) -> None:
        site.CSRF_TRUSTED_ORIGINS = ["https://*.corp.example"]
        assert origin_allowed(_scope("https://ops.corp.example"))
        assert origin_allowed(_scope("https://corp.example"))
        assert not origin_allowed(_scope("http://ops.corp.example"))
        assert not origin_allowed(_scope("https://ops.corp.example.evil"))
        assert not origin_allowed(_scope("https://ops.corp.example:8443"))

    def test_trusted_origins_need_an_allowed_host_too(self, site: Any) -> None:
        site.CSRF_TRUSTED_ORIGINS = ["https://console.example.com"]
        assert not origin_allowed(_scope("https://console.example.com", host="evil.example"))


class _Accepting(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.accept()


class HandshakeTests:
    # Channels' consumer closes stale database connections on each message
    # (close_old_connections): after earlier tests left one open in its thread, that
    # touches the database, so this test may too.
    @pytest.mark.django_db(transaction=True)
    async def test_validator_passes_the_site_origin_and_refuses_others(self, site: Any) -> None:
        app = SiteOriginValidator(_Accepting.as_asgi())
        good = WebsocketCommunicator(
            app, "/ws/overview/", headers=_scope("http://127.0.0.1:8000")["headers"]
        )
        assert (await good.connect())[0] is True
        await good.disconnect()
        bad = WebsocketCommunicator(
            app, "/ws/overview/", headers=_scope("http://127.0.0.1:9999")["headers"]
        )
        connected, code = await bad.connect()
        assert connected is False
        assert code == 1000, "denied with a clean close before accept (an HTTP 403), not an error"

    async def test_http_scopes_pass_through(self, site: Any) -> None:
        seen: list[str] = []

        async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
            seen.append(scope["type"])

        await SiteOriginValidator(inner)({"type": "http", "headers": []}, None, None)
        assert seen == ["http"]

    @pytest.mark.django_db(transaction=True)
    async def test_application_refuses_other_port_and_scheme(self, site: Any) -> None:
        for origin in ("http://127.0.0.1:9999", "https://127.0.0.1", "https://127.0.0.1:8000"):
            ws = WebsocketCommunicator(
                application, live_path("overview"), headers=_scope(origin)["headers"]
            )
            connected, _ = await ws.connect()
            assert connected is False, origin

    @pytest.mark.django_db(transaction=True)
    async def test_application_lets_the_site_origin_reach_the_consumer(self, site: Any) -> None:
        ws = WebsocketCommunicator(
            application, live_path("overview"), headers=_scope("http://127.0.0.1:8000")["headers"]
        )
        connected, _ = await ws.connect()
        assert connected is True, "the origin passed; the consumer then closes an anonymous socket"
        message = await ws.receive_output(timeout=1)
        assert message == {"type": "websocket.close", "code": 4401}
