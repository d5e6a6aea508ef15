"""ASGI entry point: HTTP through Django, WebSockets through Channels (see routing.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

application = django_asgi_app
