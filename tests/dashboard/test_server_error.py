"""An unexpected error answers Ackboard's own 500 page, with DEBUG off: styled, without the
error's text or a traceback, and without the nav (Django renders it with no request, so it
needs neither the database nor the user)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path

from dashboard import urls as dashboard_urls


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug whose text holds <b>secret-detail</b>")


urlpatterns = [path("boom/", _boom), *dashboard_urls.urlpatterns]


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_an_unexpected_error_is_the_styled_500_page() -> None:
    response = Client(raise_request_exception=False).get("/boom/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html
    assert "reload the page to see the current state" in html
    assert "secret-detail" not in html and "Traceback" not in html
    assert 'class="nav"' not in html and 'action="/logout/"' not in html
    assert "ackboard.css" in html  # styled like every page
