"""tests/migration_data.py puts back exactly what the migrations shipped."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from tests.migration_data import migration_data_restore


@pytest.mark.django_db
@pytest.mark.usefixtures("migration_data")  # after another file's flush, restored first
def test_gone_role_groups_come_back_from_the_migrations_code() -> None:
    def shipped() -> dict[str, set[str]]:
        return {
            g.name: set(g.permissions.values_list("codename", flat=True))
            for g in Group.objects.all()
        }

    before = shipped()
    assert len(before) == 2 and all(before.values())
    assert migration_data_restore() is False  # present: nothing is run
    Group.objects.all().delete()  # what another file's flush leaves
    assert migration_data_restore() is True
    assert shipped() == before
