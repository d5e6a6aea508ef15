"""Single sign-on through an OpenID Connect provider (mozilla-django-oidc), off unless configured.

Owns what Ackboard adds to the library: the provider's endpoints read from its discovery
document (``{issuer}/.well-known/openid-configuration``, fetched on first use and kept per
process), the mapping of the provider's groups claim to Ackboard's roles (the two auth
Groups of ``grant_role``), set again at every login and every session renewal, and the
pages a refused sign-in shows. The login page itself (``LoginView``) offers the provider's
button and, unless ``ACKBOARD_LOCAL_LOGIN=0``, the password form.

A refused renewal ends the session with ``auth.logout``, so its open sockets close as on
any logout (``dashboard.live.session``). It never touches Redis and never decides what a
role may do (the Groups' permissions do). Costs: one discovery fetch per process; per
login three requests to the provider (token, keys, userinfo) and a few queries for the
user and its groups; nothing on other requests but the renewal's expiry check, which
reads the session already loaded.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import Group, User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from dashboard.access.sso_config import GROUP_ROLE, USERNAME_ATTR

log = logging.getLogger("ackboard.access.oidc")

#: The request attribute a refused sign-in leaves its reason (and the user's name) on.
REFUSAL_ATTR = "ackboard_sso_refusal"

#: mozilla-django-oidc's endpoint settings, and the discovery document's names for them.
_ENDPOINTS: Mapping[str, str] = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_DISCOVERY_TIMEOUT_S = 5.0


def _roles() -> dict[str, str]:
    # The role names and their Groups have one spelling: grant_role's (the migration's).
    command = importlib.import_module("dashboard.management.commands.grant_role")
    roles: dict[str, str] = command.ROLES
    return roles


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not fit the issuer."""


# --- configuration ---------------------------------------------------------------------------


def roles_for_claims(
    claims: Mapping[str, Any], *, claim: str, mapping: Mapping[str, str]
) -> set[str]:
    """The Ackboard roles ``claims`` earn: the mapped roles of the groups in ``claim``.

    The claim may be a list of names (Okta, Keycloak, Dex, Entra ID's ``roles``) or one
    name; anything else earns nothing. Names match exactly (case included).
    """
    value = claims.get(claim)
    if isinstance(value, str):
        names: Iterable[Any] = [value]
    elif isinstance(value, list | tuple):
        names = value
    else:
        names = []
    return {mapping[n] for n in names if isinstance(n, str) and n in mapping}


_metadata: dict[str, Any] = {}
_metadata_lock = threading.Lock()


def provider_metadata() -> dict[str, Any]:
    """The provider's discovery document, fetched once per process (one GET, at most
    ``_DISCOVERY_TIMEOUT_S``). Raises ProviderUnavailable; a failed fetch is retried on
    the next call."""
    with _metadata_lock:
        if _metadata:
            return _metadata
        issuer: str = settings.ACKBOARD_OIDC_ISSUER
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=_DISCOVERY_TIMEOUT_S)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderUnavailable(f"could not read {url}: {exc}") from exc
        if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip(
            "/"
        ) != issuer.rstrip("/"):
            raise ProviderUnavailable(f"{url} names another issuer than {issuer}")
        missing = [key for key in _ENDPOINTS.values() if not document.get(key)]
        if missing:
            raise ProviderUnavailable(f"{url} lacks {', '.join(missing)}")
        _metadata.update(document)
        return _metadata


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's setting ``attr``; the four endpoints come from discovery."""
    if attr in _ENDPOINTS:
        return provider_metadata()[_ENDPOINTS[attr]]
    return import_from_settings(attr, *default)


# --- the backend -----------------------------------------------------------------------------


class RoleMappingBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # the library is untyped
    """mozilla-django-oidc's backend whose users are named by a claim and whose roles are
    exactly those their groups claim maps to, each login; no mapped role, no login.

    Only the callback view's ``authenticate`` (it passes a nonce) reaches the provider: a
    password form's call, or one with a code in some other URL, is not this backend's.
    """

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The endpoints are read at the first sign-in, not when Django loads backends (for
        # permission checks, every request): the provider may be down while pages work.
        self.UserModel = auth.get_user_model()

    def __getattr__(self, name: str) -> Any:
        # The library's OIDC_* attributes, read when a sign-in uses them.
        if name.startswith("OIDC_"):
            defaults = {"OIDC_RP_SIGN_ALGO": ("RS256",), "OIDC_RP_IDP_SIGN_KEY": (None,)}
            return oidc_setting(name, *defaults.get(name, ()))
        raise AttributeError(name)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or "nonce" not in kwargs:
            return None
        user: User | None = super().authenticate(request, **kwargs)
        return user

    def get_payload_data(self, token: bytes | str, key: Any) -> dict[str, Any]:
        """The ID token's claims, checked: signature and algorithm, issuer, audience (this
        client), expiry. A failed check is SuspiciousOperation (the callback's refusal page)."""
        algorithm = str(self.OIDC_RP_SIGN_ALGO)
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != algorithm:
                raise SuspiciousOperation(
                    f"the ID token is signed with {header.get('alg')!r}, not {algorithm}"
                )
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=str(self.OIDC_RP_CLIENT_ID),
                issuer=str(provider_metadata()["issuer"]),
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise SuspiciousOperation("the provider's ID token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"the provider's ID token is not valid ({exc})") from None
        return claims

    # --- who the user is ----------------------------------------------------------------

    def _refuse(self, reason: str, username: str | None = None) -> None:
        setattr(self.request, REFUSAL_ATTR, reason)
        if username:
            # The login throttle's audit (axes) names the user, as for a wrong password.
            setattr(self.request, USERNAME_ATTR, username)

    def get_username(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(settings.ACKBOARD_OIDC_USERNAME_CLAIM)
        return value.strip()[:150] if isinstance(value, str) else ""

    def verify_claims(self, claims: Mapping[str, Any]) -> bool:
        claim = settings.ACKBOARD_OIDC_USERNAME_CLAIM
        if not self.get_username(claims):
            self._refuse(f"the provider sent no {claim!r} claim to name the user by")
            return False
        if claim == "email" and claims.get("email_verified") is False:
            self._refuse("the provider says this email address is not verified")
            return False
        return True

    def filter_users_by_claims(self, claims: Mapping[str, Any]) -> Any:
        return self.UserModel.objects.filter(username=self.get_username(claims))

    def get_or_create_user(self, access_token: str, id_token: str, payload: Any) -> User | None:
        user: User | None = super().get_or_create_user(access_token, id_token, payload)
        if user is not None and not user.is_active:
            self._refuse("this account is disabled in Ackboard", user.get_username())
            return None
        return user

    def create_user(self, claims: Mapping[str, Any]) -> User | None:
        """A new user named by the claim, without a password (only SSO logs it in), with
        its mapped roles; None (refused) when it has none. It is kept either way, so the
        refusal is recorded under it."""
        user = self.UserModel.objects.create_user(
            self.get_username(claims), email=str(claims.get("email") or "")
        )
        return self.update_user(user, claims)

    def update_user(self, user: User, claims: Mapping[str, Any]) -> User | None:
        """Give ``user`` exactly the roles its groups map to now (none: refused, and its
        other sessions lose their access at their next check)."""
        roles = roles_for_claims(
            claims,
            claim=settings.ACKBOARD_OIDC_GROUPS_CLAIM,
            mapping=settings.ACKBOARD_OIDC_ROLES,
        )
        # A built-in role is its grant_role group; "group:<name>" names a group itself.
        names = [_roles().get(role) or role.removeprefix(GROUP_ROLE) for role in sorted(roles)]
        granted = list(Group.objects.filter(name__in=names))
        user.groups.set(granted)
        if not granted:
            roles = set()  # mapped only to groups that do not exist: no role
        email = claims.get("email")
        if isinstance(email, str) and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        if not roles:
            self._refuse(
                "your account at the provider is in no group that has a role in Ackboard",
                user.get_username(),
            )
            return None
        return user


# --- views -----------------------------------------------------------------------------------


def _refused(request: HttpRequest, reason: str, *, status: int) -> HttpResponse:
    return render(
        request,
        "registration/sso_refused.html",
        {"reason": reason, "provider_name": settings.ACKBOARD_OIDC_PROVIDER_NAME},
        status=status,
    )


class AuthenticationRequestView(OIDCAuthenticationRequestView):  # type: ignore[misc]  # the library is untyped
    """The redirect to the provider; a clear page (503) when it cannot be reached."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)
        self.OIDC_RP_CLIENT_ID = oidc_setting("OIDC_RP_CLIENT_ID")

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable as exc:
            log.warning("sso: %s", exc)
            return _refused(request, "the identity provider cannot be reached", status=503)
        response: HttpResponseBase = super().get(request)
        return response


class CallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]  # the library is untyped
    """The provider's answer. A refusal of any kind (the provider's error, a state this
    session did not send, a token that fails its checks, a user without a role) is a page
    saying why, never a 500; a refused renewal logs the session out."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response: HttpResponseBase = super().get(request)
        except SuspiciousOperation as exc:
            log.warning("sso: refused a callback: %s", exc)
            self._end_session(request)
            return _refused(request, _suspicious_reason(exc), status=400)
        except (ProviderUnavailable, requests.RequestException) as exc:
            log.warning("sso: the provider failed a sign-in: %s", exc)
            self._end_session(request)
            return _refused(request, "the identity provider did not answer as expected", status=502)
        return response

    @staticmethod
    def _end_session(request: HttpRequest) -> None:
        if request.user.is_authenticated:
            auth.logout(request)  # closes the session's sockets (user_logged_out)

    def login_failure(self) -> HttpResponse:
        request = self.request
        reason = getattr(request, REFUSAL_ATTR, "")
        if not reason and request.GET.get("error"):
            described = request.GET.get("error_description") or request.GET["error"]
            reason = f"the identity provider refused the sign-in: {described[:200]}"
        self._end_session(request)
        return _refused(request, reason or "the sign-in was not completed", status=403)


def _suspicious_reason(exc: SuspiciousOperation) -> str:
    text = str(exc)
    if "state" in text:
        return "this sign-in answer does not belong to a sign-in started here (unknown state)"
    if "Nonce" in text:
        return "the ID token does not belong to this sign-in (nonce mismatch)"
    return text[:300]


class Renewal(SessionRefresh):  # type: ignore[misc]  # the library is untyped
    """mozilla-django-oidc's SessionRefresh: past ``ACKBOARD_OIDC_RENEW_MINUTES`` a page
    request of a single-sign-on session goes back to the provider (``prompt=none``), which
    answers without a login page while its own session lasts. The callback maps the roles
    again; a refusal ends the session. An htmx request is turned into a full-page visit
    (``HX-Redirect``) that comes back to the page, not to the fragment."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, get_response: Any) -> None:
        self._endpoint = ""
        super().__init__(get_response)

    @property
    def OIDC_OP_AUTHORIZATION_ENDPOINT(self) -> str:  # noqa: N802 - the library's name
        if not self._endpoint:
            self._endpoint = str(oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT"))
        return self._endpoint

    @OIDC_OP_AUTHORIZATION_ENDPOINT.setter
    def OIDC_OP_AUTHORIZATION_ENDPOINT(self, value: Any) -> None:  # noqa: N802
        pass  # read lazily above: the provider may be down when the process starts

    def process_request(self, request: HttpRequest) -> HttpResponseBase | None:
        try:
            response: HttpResponseBase | None = super().process_request(request)
        except ProviderUnavailable as exc:
            log.warning("sso: cannot renew a session: %s", exc)
            return _refused(request, "the identity provider cannot be reached", status=503)
        htmx = getattr(request, "htmx", None)
        if response is None or not htmx or "Location" not in response:
            return response
        page = htmx.current_url_abs_path
        if page and url_has_allowed_host_and_scheme(page, allowed_hosts=None):
            request.session["oidc_login_next"] = page
        return HttpResponseClientRedirect(response["Location"])


class LoginView(auth_views.LoginView):
    """Django's login page, with the provider's button when SSO is on; without the
    password form (and refusing its POST, 403) when ``ACKBOARD_LOCAL_LOGIN=0``."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context["sso_enabled"] = settings.ACKBOARD_OIDC_ENABLED
        context["sso_provider_name"] = settings.ACKBOARD_OIDC_PROVIDER_NAME
        context["local_login"] = settings.ACKBOARD_LOCAL_LOGIN
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.ACKBOARD_LOCAL_LOGIN:
            return _refused(
                request, "passwords are turned off here: log in through single sign-on", status=403
            )
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response
