from django.apps import AppConfig
from django.db.models.signals import post_migrate


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Ackboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The rates history's and the alert webhooks' models live in their own packages.
        # The action table registers each action's permission (access.permissions),
        # and after every migrate its permission rows are created (access.grants).
        from dashboard.access.grants import action_permissions_create
        from dashboard.alerts import models as _alerts_models  # noqa: F401
        from dashboard.insight.rates import models as _rates_models  # noqa: F401
        from dashboard.insight.rates import sampler
        from dashboard.redrive import models as _redrive_models  # noqa: F401
        from dashboard.views import actions as _actions  # noqa: F401

        post_migrate.connect(
            action_permissions_create, sender=self, dispatch_uid="ackboard-action-permissions"
        )

        # The sampler thread starts with this process's first request (a web process),
        # never in manage.py commands, like the stream index's refresher.
        sampler.connect_web_start()
