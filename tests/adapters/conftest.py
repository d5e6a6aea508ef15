"""The dashboard fixtures the adapters' page checks use (a viewer, pages on this Redis)."""

from tests.dashboard.conftest import page_settings, viewer

__all__ = ["page_settings", "viewer"]
