"""The favicon: linked from every page, and /favicon.ico answered (not a logged 404)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


class FaviconTests:
    def test_every_page_links_the_svg_icon(self) -> None:
        page = Client().get("/login/").content.decode()
        link = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page)
        assert link is not None and link.group(1).endswith("/dashboard/favicon.svg")

    def test_favicon_ico_redirects_to_the_svg_without_login(self) -> None:
        client = Client()
        response = client.get("/favicon.ico")
        assert response.status_code == 301
        assert response["Location"].endswith("/dashboard/favicon.svg")
        icon = client.get(response["Location"])
        assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
        body = b"".join(icon.streaming_content)  # type: ignore[attr-defined]
        assert body.startswith(b"<svg") and b"<script" not in body
