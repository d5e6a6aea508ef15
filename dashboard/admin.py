"""The Django admin's part of Ackboard: issuing and revoking API tokens, the streams
each role reaches, and the alert webhooks.

Owns ``ApiTokenAdmin`` and the group page's stream scopes (``StreamScopeInline``: a
group's patterns, ``dashboard.access.scopes``; no rows means every stream). Adding a
token generates its secret (``dashboard.access.api_tokens``) and shows it once, on the
page the add answers with: it is never stored, and never put in a message, which would
keep it in a cookie or the session until shown. Revoking is an admin action (rows stay,
for the record); a token's user and name cannot be edited after issue. Users and
permissions are Django's own admin pages. Every change to an alert webhook writes an
audit row (never its URL, which may carry a token), and "Send test alert" (its own
permission, ``dashboard.test_alertwebhook``) posts one test message to one webhook and
says whether it answered 2xx. Never touches Redis.
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
from dashboard.access.audit import audit_record
from dashboard.alerts.delivery import TEST_BREACH, body_for, webhook_post
from dashboard.alerts.models import AlertWebhook
from dashboard.models import ApiToken, StreamScope
from queue_core import clock

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[ApiToken]
    _ScopeInline = admin.TabularInline[StreamScope, Group]
    _WebhookAdmin = admin.ModelAdmin[AlertWebhook]
else:  # ModelAdmin is generic to django-stubs only, not at runtime
    _ModelAdmin = admin.ModelAdmin
    _WebhookAdmin = admin.ModelAdmin
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


@admin.register(AlertWebhook)
class AlertWebhookAdmin(_WebhookAdmin):
    list_display = ("name", "kind", "enabled", "cooldown_s")
    list_filter = ("kind", "enabled")
    search_fields = ("name",)
    actions = ("send_test",)

    def _audit(self, request: HttpRequest, action: str, detail: str, result: str = "ok") -> None:
        audit_record(user=request.user, action=action, stream="", result=result, detail=detail)

    def save_model(
        self, request: HttpRequest, obj: AlertWebhook, form: ModelForm[AlertWebhook], change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        changed = ", ".join(form.changed_data) or "nothing"
        if change:
            self._audit(request, "alert-webhook-change", f"{obj.name}: changed {changed}")
        else:
            self._audit(request, "alert-webhook-add", f"{obj.name} ({obj.kind})")

    def delete_model(self, request: HttpRequest, obj: AlertWebhook) -> None:
        name = obj.name
        super().delete_model(request, obj)
        self._audit(request, "alert-webhook-delete", name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AlertWebhook]) -> None:
        names = list(queryset.values_list("name", flat=True))
        super().delete_queryset(request, queryset)
        for name in names:
            self._audit(request, "alert-webhook-delete", name)

    def has_test_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("dashboard.test_alertwebhook")

    @admin.action(description="Send test alert (to one webhook)", permissions=["test"])
    def send_test(self, request: HttpRequest, queryset: QuerySet[AlertWebhook]) -> None:
        webhooks = list(queryset[:2])
        if len(webhooks) != 1:
            self.message_user(request, "Select exactly one webhook to test.", messages.WARNING)
            return
        webhook = webhooks[0]
        answer = webhook_post(webhook.url, body_for(webhook.kind, TEST_BREACH, test=True))
        result = "ok" if answer.ok else "error"
        self._audit(request, "alert-webhook-test", f"{webhook.name}: {answer.text}", result)
        if answer.ok:
            self.message_user(
                request, f"Test alert to {webhook.name}: answered {answer.text}.", messages.SUCCESS
            )
        else:
            self.message_user(
                request,
                f"Test alert to {webhook.name}: no 2xx answer, {answer.text}",
                messages.ERROR,
            )
