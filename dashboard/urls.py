"""URL routes. App routes live in the ``dashboard`` namespace (``dashboard:group-detail``)."""

from django.conf import settings
from django.contrib import admin
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path, register_converter
from django.views.generic import RedirectView

from dashboard.access import oidc
from dashboard.display import converters
from dashboard.redrive import views as redrive_views
from dashboard.views import actions as action_views
from dashboard.views import admin_dry_runs, fleet_actions
from dashboard.views import api as api_views
from dashboard.views import audit as audit_views
from dashboard.views import bulk as bulk_views
from dashboard.views import charts as chart_views
from dashboard.views import edit_replay as edit_views
from dashboard.views import failure_search as failure_views
from dashboard.views import find as find_views
from dashboard.views import logout as logout_views
from dashboard.views import ops as ops_views
from dashboard.views import pages as page_views
from dashboard.views import produce as produce_views

register_converter(converters.NameConverter, "name")
register_converter(converters.EntryIdConverter, "entry_id")

# Each helper area adds its own routes to this list; keep one route per line.
app_patterns: list[URLPattern | URLResolver] = [
    path("", page_views.overview, name="overview"),
    path("streams/<name:stream>/", page_views.stream_detail, name="stream-detail"),
    path(
        "streams/<name:stream>/groups/<name:group>/",
        page_views.group_detail,
        name="group-detail",
    ),
    path(
        "streams/<name:stream>/entries/<entry_id:entry_id>/",
        page_views.entry_detail,
        name="entry-detail",
    ),
    path("streams/<name:stream>/dlq/", page_views.dlq, name="dlq"),
    # Edit & replay, payload search, jump to time (before dlq-action's <action>).
    path("streams/<name:stream>/dlq/<entry_id:dlq_id>/edit/", edit_views.dlq_edit, name="dlq-edit"),
    path(
        "streams/<name:stream>/dlq/<entry_id:dlq_id>/edit-replay/",
        edit_views.dlq_edit_replay,
        name="dlq-edit-replay",
    ),
    path("streams/<name:stream>/find/", find_views.payload_find, name="payload-find"),
    path("streams/<name:stream>/produce/", produce_views.produce_page, name="produce"),
    path(
        "streams/<name:stream>/entries/<entry_id:entry_id>/do/<slug:action>/",
        action_views.stream_entry_action,
        name="stream-entry-action",
    ),
    path("streams/<name:stream>/jump/", find_views.time_jump, name="time-jump"),
    path("metrics", ops_views.metrics, name="metrics"),
    path("healthz", ops_views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever base.html links; answer it, not a logged 404.
    path(
        "favicon.ico",
        RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True),
        name="favicon",
    ),
    path("audit/", audit_views.audit_page, name="audit"),
    path("failures/", failure_views.failure_search, name="failure-search"),
    path("audit.csv", audit_views.audit_csv, name="audit-csv"),
    path(
        "streams/<name:stream>/groups/<name:group>/entries/<entry_id:entry_id>/<slug:action>/",
        action_views.entry_action,
        name="entry-action",
    ),
    path(
        "streams/<name:stream>/groups/<name:group>/bulk/<slug:action>/",
        bulk_views.bulk_action,
        name="bulk-action",
    ),
    path("streams/<name:stream>/dlq/purge/", action_views.dlq_purge, name="dlq-purge"),
    # Actions on a group, one of its consumers, or a stream (the "group", "consumer" and
    # "stream" rows of dashboard.views.actions.ACTIONS).
    path(
        "streams/<name:stream>/groups/<name:group>/do/<slug:action>/",
        action_views.group_action,
        name="group-action",
    ),
    path(
        "streams/<name:stream>/groups/<name:group>/consumers/<name:consumer>/<slug:action>/",
        action_views.consumer_action,
        name="consumer-action",
    ),
    path(
        "streams/<name:stream>/do/<slug:action>/", action_views.stream_action, name="stream-action"
    ),
    path(
        "streams/<name:stream>/dlq/<entry_id:dlq_id>/<slug:action>/",
        action_views.dlq_action,
        name="dlq-action",
    ),
    # Routes of their own (previews, dry runs, partials) of the fleet and admin actions.
    *fleet_actions.PATTERNS,
    *admin_dry_runs.PATTERNS,
    *chart_views.patterns(),  # the rate charts' data
    *redrive_views.patterns(),  # redrive dead letters: dialog, controls, API
    # The JSON API (token auth, no session: see dashboard.views.api); a trailing / is optional.
    re_path(r"^api/v1/actions/edit-replay/?$", api_views.api_edit_replay, name="api-edit-replay"),
    re_path(r"^api/v1/actions/produce/?$", api_views.api_produce, name="api-produce"),
    re_path(r"^api/v1/actions/(?P<action>[-a-z]+)/?$", api_views.api_action, name="api-action"),
    re_path(r"^api/v1/bulk/(?P<action>[-a-z]+)/?$", api_views.api_bulk, name="api-bulk"),
    re_path(r"^api/v1/whoami/?$", api_views.api_whoami, name="api-whoami"),
    re_path(r"^api/(?P<rest>.*)$", api_views.api_not_found, name="api-not-found"),
]

urlpatterns = [
    path("login/", oidc.LoginView.as_view(), name="login"),
    path("logout/", logout_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include((app_patterns, "dashboard"))),
]
if settings.ACKBOARD_OIDC_ENABLED:
    # Single sign-on: /oidc/authenticate/ (to the provider) and /oidc/callback/ (back).
    urlpatterns.insert(1, path("oidc/", include("mozilla_django_oidc.urls")))
