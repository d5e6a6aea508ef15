"""URL routes. App routes live in the ``dashboard`` namespace (``dashboard:group-detail``)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path, register_converter

from dashboard import converters
from dashboard.views import audit as audit_views

register_converter(converters.NameConverter, "name")
register_converter(converters.EntryIdConverter, "entry_id")

# Each helper area adds its own routes to this list; keep one route per line.
app_patterns: list[URLPattern | URLResolver] = [
    path("audit/", audit_views.audit_page, name="audit"),
    path("audit.csv", audit_views.audit_csv, name="audit-csv"),
]

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include((app_patterns, "dashboard"))),
]
