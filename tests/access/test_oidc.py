"""Single sign-on's rules that need no provider: the role mapping, its configuration, the
login throttle's name for a refused sign-on, and the login page with SSO off. The
protocol itself is tested against a real provider in tests/browser/test_sso_browser.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory

from dashboard.access.login_throttle import login_username
from dashboard.access.oidc import roles_for_claims
from dashboard.access.sso_config import ROLE_NAMES, USERNAME_ATTR, role_map_parse
from tests.dashboard.test_config_errors import KEY, _env, _one_line, _run

MAPPING = {"ackboard-operators": "operator", "ackboard-viewers": "read-only"}


class RoleMappingTests:
    @pytest.mark.parametrize(
        ("groups", "roles"),
        [
            (["ackboard-operators"], {"operator"}),
            (["ackboard-viewers", "marketing"], {"read-only"}),
            (["ackboard-viewers", "ackboard-operators"], {"operator", "read-only"}),
            (["marketing"], set()),
            ([], set()),
            ("ackboard-viewers", {"read-only"}),  # a single name, not a list
            (["Ackboard-Operators"], set()),  # names match exactly
            ([None, 3, {"x": 1}], set()),
            (None, set()),
            ({"ackboard-operators": True}, set()),
        ],
    )
    def test_groups_map_to_roles(self, groups: Any, roles: set[str]) -> None:
        claims = {"sub": "1", "groups": groups}
        assert roles_for_claims(claims, claim="groups", mapping=MAPPING) == roles

    def test_the_claim_name_is_configurable(self) -> None:
        claims = {"groups": ["ackboard-viewers"], "roles": ["ackboard-operators"]}
        assert roles_for_claims(claims, claim="roles", mapping=MAPPING) == {"operator"}
        assert roles_for_claims({}, claim="roles", mapping=MAPPING) == set()

    def test_role_names_are_grant_roles(self) -> None:
        command = importlib.import_module("dashboard.management.commands.grant_role")
        assert set(ROLE_NAMES) == set(command.ROLES)


class RoleMapParseTests:
    def test_pairs(self) -> None:
        assert role_map_parse(" ackboard-operators = operator , a=b=read-only ,") == {
            "ackboard-operators": "operator",
            "a=b": "read-only",
        }
        assert role_map_parse("orders=group:orders team") == {"orders": "group:orders team"}

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("ackboard-operators", "is not <provider group>=<role>"),
            ("=operator", "is not <provider group>=<role>"),
            ("admins=superuser", "role 'superuser' is not one of operator, read-only or group:"),
            ("admins=group:", "role 'group:' is not one of"),
            (" , ", "maps no provider group to a role"),
        ],
    )
    def test_refusals_name_the_setting(self, value: str, message: str) -> None:
        with pytest.raises(ImproperlyConfigured, match="ACKBOARD_OIDC_ROLES") as raised:
            role_map_parse(value)
        assert message in str(raised.value)


class LoginUsernameTests:
    def test_a_password_login_is_counted_under_its_username(self) -> None:
        request = RequestFactory().post("/login/", {"username": "form-name"})
        assert login_username(request, {"username": "op"}) == "op"
        assert login_username(request, None) == "form-name"

    def test_a_refused_sign_on_is_counted_under_the_providers_name(self) -> None:
        request = RequestFactory().get("/oidc/callback/")
        assert login_username(request, {"nonce": "n"}) is None
        setattr(request, USERNAME_ATTR, "nora@example.com")
        assert login_username(request, {"nonce": "n"}) == "nora@example.com"


@pytest.mark.django_db
class LoginPageWithoutSsoTests:
    def test_the_page_is_the_password_form_alone(self) -> None:
        html = Client().get("/login/").content.decode()
        assert 'name="password"' in html
        assert "Log in with" not in html

    def test_no_sso_routes(self) -> None:
        assert Client().get("/oidc/authenticate/").status_code == 404


class SsoSettingsTests:
    """Refused configurations: one line naming the setting, exit 2 (``manage.py check``)."""

    BASE = {
        "DJANGO_SECRET_KEY": KEY,
        "ACKBOARD_OIDC_ISSUER": "https://idp.example.com",
        "ACKBOARD_OIDC_CLIENT_ID": "ackboard",
        "ACKBOARD_OIDC_CLIENT_SECRET": "s3cret",
        "ACKBOARD_OIDC_ROLES": "ackboard-operators=operator",
    }

    @pytest.mark.parametrize(
        ("env", "expected"),
        [
            ({"ACKBOARD_OIDC_ISSUER": "", "ACKBOARD_LOCAL_LOGIN": "0"}, "ACKBOARD_LOCAL_LOGIN=0"),
            ({"ACKBOARD_OIDC_CLIENT_SECRET": ""}, "ACKBOARD_OIDC_CLIENT_SECRET is required"),
            ({"ACKBOARD_OIDC_ROLES": "admins=root"}, "ACKBOARD_OIDC_ROLES: role 'root'"),
            ({"ACKBOARD_OIDC_ISSUER": "idp.example.com"}, "ACKBOARD_OIDC_ISSUER must be a URL"),
        ],
    )
    def test_refused(self, tmp_path: Path, env: dict[str, str], expected: str) -> None:
        out = _run([sys.executable, "manage.py", "check"], _env(tmp_path, **{**self.BASE, **env}))
        _one_line(out, expected)

    def test_a_full_configuration_starts_without_reaching_the_provider(
        self, tmp_path: Path
    ) -> None:
        # idp.example.com is never asked: discovery waits for the first sign-in.
        out = _run(
            [sys.executable, "manage.py", "check"],
            _env(tmp_path, **self.BASE, ACKBOARD_LOCAL_LOGIN="0"),
        )
        assert out.returncode == 0, out.stdout + out.stderr
