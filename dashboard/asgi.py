"""ASGI entry point: HTTP through Django, WebSockets through Channels (see routing.py).

Sockets pass ``SiteOriginValidator`` (the Origin header must be this site's own origin,
scheme, host and port, or a trusted one: see origin.py) and ``AuthMiddlewareStack`` (the
Django session); consumers then check permissions, and keep checking them while open. A
path no surface serves is closed with 4404 (``routing.websocket_routes``), not a 500.
"""

import gc
import os
import sys

from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
# Django must be set up before anything imports models (consumers, routing).
try:
    django_asgi_app = get_asgi_application()
except ImproperlyConfigured as exc:
    # A configuration error is one line, as from manage.py, not the server's traceback.
    sys.stderr.write(f"Error: {exc}\n")
    raise SystemExit(2) from None

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from dashboard import routing  # noqa: E402
from dashboard.access.origin import SiteOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SiteOriginValidator(AuthMiddlewareStack(URLRouter(routing.websocket_routes))),
    }
)

# Everything loaded so far (Django, the apps, templates' modules: ~130,000 objects) lives as
# long as the process; moved out of the collector's sight, a full collection no longer
# walks it. Without this, one request in a few hundred paid a ~50 ms full collection.
# Collected first, so that no garbage of the start-up is kept for the process's life.
# Kept: a full collection of the unfrozen heap costs 33.5 ms of CPU (docs/benchmarks.md).
gc.collect()
gc.freeze()
