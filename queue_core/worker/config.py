"""A worker's configuration: one frozen WorkerConfig, its validation and its flags.

Owns every worker setting in one declaration: its default, its rule (checked when the
config is built, with a one-line WorkerConfigError) and, for those an operator sets, its
``queue_worker`` flag and help text. The command adds the flags to its parser and builds
the config from the parsed options; the demo and a fleet (``--processes``, see
``fleet``) write their workers' command lines with ``worker_argv``: so a setting is
declared once. ``--processes`` is the one flag that is not a WorkerConfig setting: each
process runs one Worker. Also owns loading a handler from
``package.module:function`` and the default consumer name. Never touches Redis; costs
nothing after construction.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import socket
import uuid
from argparse import ArgumentParser
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_core.connection import redis_url
from queue_core.control import HEARTBEAT_INTERVAL_MS, HEARTBEAT_STALE_MS
from queue_core.keys import CrossSlotName, stream_keys
from queue_core.parsing import FieldParser, fields_parse
from queue_core.worker.lanes import Handler

#: The longest heartbeat interval: two beats fit in the time after which one is stale.
MAX_HEARTBEAT_MS = HEARTBEAT_STALE_MS // 2

_START_ID = re.compile(r"\A(\$|\d{1,20}(-\d{1,20})?)\Z")


class WorkerConfigError(ValueError):
    """Bad worker configuration; the CLI prints the message on one line and exits 2."""


def consumer_name_default() -> str:
    """``host-pid-random``: unique per process, readable in XINFO CONSUMERS."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class _Flag:
    """A setting's ``queue_worker`` flag: ``--`` and the field name with dashes."""

    help: str
    type: Callable[[str], Any] = str
    required: bool = False


def _flag(help: str, **options: Any) -> dict[str, _Flag]:
    return {"flag": _Flag(help, **options)}


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything one Worker needs; validated when built (raises WorkerConfigError).

    ``consumer`` and ``url`` left empty are chosen here: ``host-pid-random``, and the
    connection settings (VALKEY_URL, then REDIS_URL, then the local default).
    """

    stream: str = field(metadata=_flag("Stream to consume.", required=True))
    group: str = field(metadata=_flag("Consumer group.", required=True))
    #: On the command line, a ``package.module:function`` path (see handler_load).
    handler: Handler = field(
        metadata=_flag("package.module:function taking a Job (sync or async).", required=True)
    )
    consumer: str = field(default="", metadata=_flag("Consumer name (default host-pid-random)."))
    batch: int = field(default=100, metadata=_flag("XREADGROUP COUNT (default 100).", type=int))
    concurrency: int = field(
        default=1, metadata=_flag("Handlers in flight at once (default 1).", type=int)
    )
    block_ms: int = field(
        default=2000, metadata=_flag("XREADGROUP BLOCK (default 2000).", type=int)
    )
    min_idle_ms: int = field(
        default=30_000,
        metadata=_flag(
            "Reclaim entries idle this long (default 30000); above your slowest handler.", type=int
        ),
    )
    max_deliveries: int = field(
        default=5,
        metadata=_flag(
            "Dead-letter an entry whose handler fails on this delivery (default 5).", type=int
        ),
    )
    reclaim_interval_ms: int | None = field(
        default=None,
        metadata=_flag(
            "XAUTOCLAIM sweep interval (default half min-idle, at most 10000).", type=int
        ),
    )
    group_start: str = field(
        default="$", metadata=_flag("Where a new group starts: $ (default) or 0.")
    )
    grace_seconds: float = field(
        default=30.0,
        metadata=_flag(
            "On SIGTERM/SIGINT, how long in-flight handlers may finish (default 30). "
            "A second signal more than 1 s after the first stops waiting.",
            type=float,
        ),
    )
    heartbeat_ms: int = field(
        default=HEARTBEAT_INTERVAL_MS,
        metadata=_flag(
            "How often the worker writes its heartbeat (default 2000, at most 5000); it reads "
            "its group's pause at least every 500.",
            type=int,
        ),
    )
    url: str = ""
    parser: FieldParser = fields_parse
    #: The longest wait between reconnect attempts while Redis is away.
    backoff_cap_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.stream or not self.group:
            raise WorkerConfigError("stream and group must be non-empty")
        try:
            stream_keys(self.stream)
        except CrossSlotName as exc:
            raise WorkerConfigError(str(exc)) from exc
        for name, value, low in (
            ("batch", self.batch, 1),
            ("concurrency", self.concurrency, 1),
            ("block-ms", self.block_ms, 1),
            ("min-idle-ms", self.min_idle_ms, 0),
            ("max-deliveries", self.max_deliveries, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise WorkerConfigError(f"{name} must be a whole number >= {low}, not {value!r}")
        if (
            isinstance(self.heartbeat_ms, bool)
            or not isinstance(self.heartbeat_ms, int)
            or not 1 <= self.heartbeat_ms <= MAX_HEARTBEAT_MS
        ):
            raise WorkerConfigError(
                f"heartbeat-ms must be a whole number from 1 to {MAX_HEARTBEAT_MS} (a "
                f"heartbeat older than {HEARTBEAT_STALE_MS} ms shows the worker as gone), "
                f"not {self.heartbeat_ms!r}"
            )
        if self.reclaim_interval_ms is not None and self.reclaim_interval_ms < 1:
            raise WorkerConfigError("reclaim-interval-ms must be >= 1")
        if not _START_ID.match(self.group_start):
            raise WorkerConfigError(
                f"group-start must be $, 0 or a stream id, not {self.group_start!r}"
            )
        if self.grace_seconds < 0:
            raise WorkerConfigError("grace-seconds must be >= 0")
        if not callable(self.handler):
            raise WorkerConfigError(f"handler {self.handler!r} is not callable")
        # Frozen: the two defaults chosen at construction are set through object.
        object.__setattr__(self, "consumer", self.consumer or consumer_name_default())
        object.__setattr__(self, "url", self.url or redis_url())

    @property
    def reclaim_every_ms(self) -> int:
        """The sweep interval. Default: half min-idle (at least 100 ms, at most 10 s), so a
        stale entry waits at most 1.5x min-idle; each sweep is one XAUTOCLAIM of up to
        ``batch`` entries."""
        return self.reclaim_interval_ms or max(100, min(self.min_idle_ms // 2, 10_000))


def handler_load(path: str) -> Handler:
    """Import ``package.module:function`` (the attribute may be dotted).

    Raises WorkerConfigError with a one-line message.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise WorkerConfigError(f"handler {path!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or whatever the module raised on import
        raise WorkerConfigError(
            f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise WorkerConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise WorkerConfigError(
            f"handler {path!r} is not callable (it is a {type(target).__name__})"
        )
    handler: Handler = target
    return handler


# --- the queue_worker flags --------------------------------------------------------------


def _flags() -> list[tuple[dataclasses.Field[Any], _Flag]]:
    """The settings with a flag, in declaration order."""
    return [
        (f, f.metadata["flag"]) for f in dataclasses.fields(WorkerConfig) if "flag" in f.metadata
    ]


#: ``--processes``: how many worker processes the command runs on the group.
PROCESSES = _Flag(
    "Worker processes on the group (default 1). Above 1 a parent supervises them: each "
    "has its own consumer name (--consumer NAME gives NAME-1 ... NAME-N), a child that "
    "dies is restarted with backoff, and one SIGTERM/SIGINT stops them all gracefully.",
    type=int,
)


def processes_check(value: object) -> int:
    """``--processes``: a whole number >= 1. Raises WorkerConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkerConfigError(f"processes must be a whole number >= 1, not {value!r}")
    return value


def worker_arguments_add(parser: ArgumentParser) -> None:
    """Add every worker flag (``--stream`` ... ``--grace-seconds``, ``--processes``) to
    ``parser``."""
    parser.add_argument("--processes", default=1, type=PROCESSES.type, help=PROCESSES.help)
    for setting, flag in _flags():
        options: dict[str, Any] = {"help": flag.help}
        if flag.required:
            options["required"] = True
        else:
            options["default"] = setting.default
        if flag.type is not str:
            options["type"] = flag.type
        parser.add_argument("--" + setting.name.replace("_", "-"), **options)


def worker_config_from_options(options: Mapping[str, Any], **settings: Any) -> WorkerConfig:
    """The WorkerConfig of parsed ``queue_worker`` options (``--handler`` is imported here).

    ``settings`` are the ones without a flag (``url``, ``parser``, ``backoff_cap_s``).
    Raises WorkerConfigError.
    """
    values = {setting.name: options[setting.name] for setting, _ in _flags()}
    values["handler"] = handler_load(values["handler"])
    return WorkerConfig(**values, **settings)


def worker_argv(**values: object) -> list[str]:
    """``queue_worker`` flags for ``values`` (WorkerConfig names, and ``processes``), in
    declaration order.

    ``worker_argv(stream="s", batch=10)`` is ``["--stream", "s", "--batch", "10"]``. A
    value of None is left out (the flag's default). A name with no flag raises TypeError,
    so a typo cannot pass silently.
    """
    names = ["processes", *(setting.name for setting, _ in _flags())]
    unknown = set(values) - set(names)
    if unknown:
        raise TypeError(f"no queue_worker flag for {', '.join(sorted(unknown))}")
    argv: list[str] = []
    for name in names:
        if values.get(name) is not None:
            argv += ["--" + name.replace("_", "-"), str(values[name])]
    return argv


def worker_argv_from_options(options: Mapping[str, Any], **overrides: object) -> list[str]:
    """The flags that reproduce parsed ``queue_worker`` options (without ``--processes``),
    with ``overrides`` (WorkerConfig names) in place of theirs: a fleet's child command
    lines. An empty ``consumer`` is left out, so the child picks its own default."""
    values: dict[str, object] = {setting.name: options[setting.name] for setting, _ in _flags()}
    values.update(overrides)
    if not values.get("consumer"):
        values.pop("consumer", None)
    return worker_argv(**values)
