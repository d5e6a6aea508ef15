"""Group administration's subcommands of ``manage.py ackboard`` (create-group,
delete-group, reset-position, trim).

Owned by the group-administration work (dash-admin); this stub holds the hook the
command reads: ``SUBCOMMANDS``, rows of ``dashboard.cli_table.Subcommand``, appended to
the command's own table.
"""

from __future__ import annotations

from dashboard.cli_table import Subcommand

SUBCOMMANDS: tuple[Subcommand, ...] = ()
