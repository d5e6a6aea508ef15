from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Ackboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The rates history's model lives in its own package (dashboard.insight.rates.models).
        from dashboard.insight.rates import models as _rates_models  # noqa: F401
        from dashboard.insight.rates import sampler
        from dashboard.redrive import models as _redrive_models  # noqa: F401

        # The action table registers each action's permission (access.permissions).
        from dashboard.views import actions as _actions  # noqa: F401

        # The sampler thread starts with this process's first request (a web process),
        # never in manage.py commands, like the stream index's refresher.
        sampler.connect_web_start()
