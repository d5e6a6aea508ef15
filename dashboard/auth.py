"""Ackboard's authentication backend: Django's ``ModelBackend``, with the session's user
read by one SQL statement built once per process.

Owns how a logged-in request's user is loaded (``AUTHENTICATION_BACKENDS``). Every page
and socket connect loads the session's user; ``ModelBackend.get_user`` does it through the
ORM (a queryset cloned, filtered and compiled to SQL on each call: ~0.2 ms of a page that
takes a few). ``UserBackend.get_user`` runs the same SELECT, written once per user model
and database vendor, and builds the user with ``Model.from_db`` as the ORM would. Logins,
passwords and permissions are ``ModelBackend``'s, unchanged (the permissions are read by
``dashboard.middleware.PermissionsMiddleware`` in one statement).

It reads the user from its model's one table, as the default manager would with no
filter: a user model whose default manager filters rows, or whose fields span tables
(multi-table inheritance), is read through the ORM, as ``ModelBackend`` reads it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ValidationError
from django.db import connections, router

#: A field's value as the database returned it -> as the ORM gives it.
_Converter = Any


@lru_cache(maxsize=8)
def _user_select(
    model: Any, alias: str, vendor: str
) -> tuple[str, list[str], tuple[tuple[int, tuple[_Converter, ...], Any], ...]] | None:
    """The SELECT of one user by primary key, its fields' attribute names, and each
    field's converters (the ORM's: SQLite's aware datetimes and booleans, for instance),
    or None where the ORM must read it (a default manager that filters rows, fields in a
    parent model's table)."""
    if model._meta.parents or model._default_manager.get_queryset().query.where:
        return None
    connection = connections[alias]
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    sql = (
        f"SELECT {columns} FROM {quote(model._meta.db_table)} "
        f"WHERE {quote(model._meta.pk.column)} = %s"
    )
    converters = []
    for i, field in enumerate(fields):
        col = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        if found:
            converters.append((i, tuple(found), col))
    return sql, [f.attname for f in fields], tuple(converters)


def user_by_pk(user_id: Any) -> Any | None:
    """The user with primary key ``user_id``, or None: what
    ``_default_manager.get(pk=user_id)`` returns, read by one prepared statement."""
    model = get_user_model()
    alias = router.db_for_read(model)
    connection = connections[alias]
    select = _user_select(model, alias, connection.vendor)
    if select is None:
        try:
            return model._default_manager.get(pk=user_id)
        except model.DoesNotExist:
            return None
    sql, names, converters = select
    pk = model._meta.pk
    try:
        value = pk.get_db_prep_value(pk.to_python(user_id), connection)
    except ValidationError:  # no user has such a key (the ORM would raise ValueError)
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql, [value])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for i, found, col in converters:
        for convert in found:
            values[i] = convert(values[i], col, connection)
    return model.from_db(alias, names, values)


class UserBackend(ModelBackend):
    """``ModelBackend``, with ``get_user`` (every request's user) in one prepared
    statement; everything else, and every answer, is ``ModelBackend``'s."""

    def get_user(self, user_id: Any) -> Any | None:
        user = user_by_pk(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None
