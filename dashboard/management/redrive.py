"""The redrive's subcommands of ``manage.py ackboard`` (rows of ``SUBCOMMANDS``).

- ``redrive STREAM [--group G] [--fingerprint F] [--reason-contains TEXT] [--since T]
  [--until T] [--canary N] [--rate R]``: a dry run (how many would be replayed); with
  ``--yes`` it starts the job (``manage.py run_jobs`` works on it);
- ``redrive-job JOB pause|resume|continue|stop|cancel``.

Each runs as ``--user`` through ``dashboard.redrive.service`` (that user's permission,
the input rules, the audit row with the channel "cli"). It parses and words only.
"""

from __future__ import annotations

from argparse import ArgumentParser

from django.contrib.auth.models import User

from dashboard.management.table import Options, Subcommand, single
from dashboard.redrive import service
from dashboard.runtime.connection import get_redis
from dashboard.views.remote import Answer


def _redrive_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("--group", default="", help="Only dead letters of this origin group.")
    p.add_argument("--fingerprint", default="", help="Only those whose last failure has it.")
    p.add_argument("--reason-contains", default="", help="Only those whose reason has it.")
    p.add_argument("--since", default="", help="Dead-lettered at or after (UTC time or ms).")
    p.add_argument("--until", default="", help="Dead-lettered at or before (UTC time or ms).")
    p.add_argument("--canary", default="0", help="Replay N first, then wait for continue.")
    p.add_argument("--rate", default="", help="Replays per second (capped by the setting).")
    p.add_argument("--yes", action="store_true", help="Start the redrive (else a dry run).")


def _answer(outcome: service.RedriveAnswer) -> Answer:
    return Answer(outcome.status, outcome.payload())


def _redrive(user: User, options: Options) -> Answer:
    data = {k: options[k] for k in ("group", "fingerprint", "reason_contains", "since",
                                    "until", "canary", "rate")}  # fmt: skip
    outcome = service.redrive(user=user, client=get_redis(), stream=options["stream"],
                              data=data, confirm=options["yes"], channel="cli")  # fmt: skip
    return _answer(outcome)


def _job_arguments(p: ArgumentParser) -> None:
    p.add_argument("job", help="The job's number (Redrive #N).")
    p.add_argument("control", choices=sorted(service.CONTROLS))


def _job(user: User, options: Options) -> Answer:
    return _answer(service.control(user=user, job_id=options["job"],
                                   action=options["control"], channel="cli"))  # fmt: skip


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "redrive",
        "redrive dead letters (a dry run without --yes)",
        _redrive_arguments,
        single(_redrive),
    ),  # fmt: skip
    Subcommand(
        "redrive-job",
        "pause, resume, continue, stop or cancel a redrive",
        _job_arguments,
        single(_job),
    ),  # fmt: skip
)
