"""Single sign-on's configuration, read by settings.py: only what may run before Django's
apps are loaded (no models, no mozilla-django-oidc, which imports them).

Owns the parse of ``ACKBOARD_OIDC_ROLES``. It never talks to the provider
(``dashboard.access.oidc`` does). Costs nothing past startup.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

#: The roles a provider group may map to: ``grant_role``'s names (a test keeps them equal),
#: or ``group:<name>``, a Django group made in the admin site (a team's role, with its
#: permissions and the streams it reaches, ``dashboard.access.scopes``).
ROLE_NAMES: tuple[str, ...] = ("operator", "read-only")
GROUP_ROLE = "group:"
#: The backend settings.py adds to AUTHENTICATION_BACKENDS when SSO is on.
BACKEND = "dashboard.access.oidc.RoleMappingBackend"
#: The middleware that renews sign-on sessions (after django-htmx's, which it reads).
RENEWAL_MIDDLEWARE = "dashboard.access.oidc.Renewal"
#: The request attribute a sign-on refused after the provider named the user carries
#: that name on, for the login throttle (``login_throttle.login_username``).
USERNAME_ATTR = "ackboard_sso_username"


def role_map_parse(value: str, *, name: str = "ACKBOARD_OIDC_ROLES") -> dict[str, str]:
    """``"ackboard-operators=operator,ackboard-viewers=read-only"`` as {group: role}.

    The group is everything before the last ``=`` (group names may hold ``=``). Raises
    ImproperlyConfigured naming ``name`` for a pair without ``=``, an empty group, a role
    that is not one of ROLE_NAMES or ``group:<name>``, or no pair at all.
    """
    mapping: dict[str, str] = {}
    for pair in (p.strip() for p in value.split(",")):
        if not pair:
            continue
        group, sep, role = (part.strip() for part in pair.rpartition("="))
        if not sep or not group:
            raise ImproperlyConfigured(f"{name}: {pair!r} is not <provider group>=<role>")
        if role not in ROLE_NAMES and not (role.startswith(GROUP_ROLE) and role[len(GROUP_ROLE) :]):
            known = ", ".join(ROLE_NAMES) + " or group:<a group of the admin site>"
            raise ImproperlyConfigured(f"{name}: role {role!r} is not one of {known}")
        mapping[group] = role
    if not mapping:
        raise ImproperlyConfigured(f"{name} maps no provider group to a role")
    return mapping
