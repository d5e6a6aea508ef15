"""The Django admin's part of Ackboard: issuing and revoking API tokens, and the streams
each role reaches.

Owns ``ApiTokenAdmin`` and the group page's stream scopes (``StreamScopeInline``: a
group's patterns, ``dashboard.access.scopes``; no rows means every stream). Adding a
token generates its secret (``dashboard.access.api_tokens``) and shows it once, on the
page the add answers with: it is never stored, and never put in a message, which would
keep it in a cookie or the session until shown. Revoking is an admin action (rows stay,
for the record); a token's user and name cannot be edited after issue. Users and
permissions are Django's own admin pages. Never touches Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from dashboard.access.api_tokens import token_issue
from dashboard.models import ApiToken, StreamScope
from queue_core import clock

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[ApiToken]
    _ScopeInline = admin.TabularInline[StreamScope, Group]
else:  # ModelAdmin is generic to django-stubs only, not at runtime
    _ModelAdmin = admin.ModelAdmin
    _ScopeInline = admin.TabularInline


#: What an issued token's page shows, all read-only (never the secret or its hash).
SHOWN = ("user", "name", "key_id", "created_at", "last_used_at", "revoked_at")


@admin.register(ApiToken)
class ApiTokenAdmin(_ModelAdmin):
    list_display = ("key_id", "name", "user", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("key_id", "name", "user__username")
    actions = ("revoke",)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        return ("user", "name") if obj is None else SHOWN

    def get_readonly_fields(
        self, request: HttpRequest, obj: ApiToken | None = None
    ) -> tuple[str, ...]:
        return () if obj is None else SHOWN

    def save_model(
        self, request: HttpRequest, obj: ApiToken, form: ModelForm[ApiToken], change: bool
    ) -> None:
        if change:
            return  # nothing about an issued token is editable
        row, token = token_issue(user=obj.user, name=obj.name)
        obj.pk, obj.key_id, obj.created_at = row.pk, row.key_id, row.created_at
        obj._state.adding = False
        request._ackboard_new_token = token  # type: ignore[attr-defined] # shown once below

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        token: str = getattr(request, "_ackboard_new_token", "")
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "token_row": obj,
            "token": token,
            "title": "API token issued",
        }
        return TemplateResponse(request, "admin/dashboard/apitoken/issued.html", context)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=clock.now_utc())
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)


class StreamScopeInline(_ScopeInline):
    model = StreamScope
    extra = 1
    verbose_name = "stream this role reaches"
    verbose_name_plural = "Streams this role reaches (none: every stream)"


class ScopedGroupAdmin(GroupAdmin):
    inlines = (StreamScopeInline,)


admin.site.unregister(Group)
admin.site.register(Group, ScopedGroupAdmin)
