"""WorkerConfig (queue_core.worker.config): its rules, its flags, and handler loading.

No Redis: a config is checked when it is built, before anything connects.
"""

from __future__ import annotations

import re
from argparse import ArgumentParser
from typing import Any

import pytest

from queue_core.parsing import fields_parse
from queue_core.worker import (
    Worker,
    WorkerConfig,
    WorkerConfigError,
    handler_load,
    worker_arguments_add,
    worker_argv,
    worker_config_from_options,
)
from tests.integration.handlers import quick

URL = "redis://127.0.0.1:1/0"


def parsed(argv: list[str]) -> dict[str, Any]:
    parser = ArgumentParser()
    worker_arguments_add(parser)
    return vars(parser.parse_args(argv))


class WorkerConfigTests:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"stream": "a}b"}, "cannot share a cluster slot"),
            ({"batch": 0}, "batch must be"),
            ({"max_deliveries": 0}, "max-deliveries must be"),
            ({"group_start": "yesterday"}, "group-start must be"),
            ({"handler": "not callable"}, "is not callable"),
        ],
    )
    def test_bad_configuration_is_refused(
        self, redis_url: str, options: dict[str, Any], message: str
    ) -> None:
        kwargs: dict[str, Any] = {"stream": "s", "group": "g", "handler": print} | options
        with pytest.raises(WorkerConfigError, match=message):
            Worker(url=redis_url, **kwargs)

    def test_empty_consumer_and_url_are_chosen_when_built(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("VALKEY_URL", "redis://valkey.example:6380/2")
        config = WorkerConfig(stream="s", group="g", handler=quick)
        assert re.fullmatch(r".+-\d+-[0-9a-f]{6}", config.consumer)
        assert config.url == "redis://valkey.example:6380/2"
        assert WorkerConfig(stream="s", group="g", handler=quick, consumer="c1").consumer == "c1"

    def test_reclaim_interval_defaults_to_half_min_idle_within_bounds(self) -> None:
        def every(**options: Any) -> int:
            return WorkerConfig(
                stream="s", group="g", handler=quick, url=URL, **options
            ).reclaim_every_ms

        assert every() == 10_000  # half of 30 s is 15 s: capped at 10 s
        assert every(min_idle_ms=3000) == 1500
        assert every(min_idle_ms=0) == 100
        assert every(min_idle_ms=3000, reclaim_interval_ms=7) == 7

    def test_is_frozen(self) -> None:
        config = WorkerConfig(stream="s", group="g", handler=quick, url=URL)
        with pytest.raises(AttributeError):
            config.batch = 5

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"stream": ""}, "stream and group must be non-empty"),
            ({"concurrency": True}, "concurrency must be a whole number >= 1, not True"),
            ({"block_ms": 1.5}, "block-ms must be"),
            ({"min_idle_ms": -1}, "min-idle-ms must be a whole number >= 0"),
            ({"reclaim_interval_ms": 0}, "reclaim-interval-ms must be >= 1"),
            ({"grace_seconds": -0.1}, "grace-seconds must be >= 0"),
        ],
    )
    def test_more_bad_configuration_is_refused(self, options: dict[str, Any], message: str) -> None:
        kwargs: dict[str, Any] = {"stream": "s", "group": "g", "handler": quick, "url": URL}
        with pytest.raises(WorkerConfigError, match=message):
            WorkerConfig(**(kwargs | options))

    def test_a_worker_takes_a_config_or_its_fields_not_both(self) -> None:
        fields: dict[str, Any] = {"stream": "s", "group": "g", "handler": quick, "url": URL,
                                  "consumer": "c1", "batch": 7}  # fmt: skip
        config = WorkerConfig(**fields)
        assert Worker(config).config is config
        assert Worker(**fields).config == config
        with pytest.raises(TypeError):
            Worker(config, batch=8)


class HandlerLoadTests:
    @pytest.mark.parametrize(
        ("path", "message"),
        [
            ("tests.integration.handlers", "must look like package.module:function"),
            ("tests.integration.no_such_module:f", "cannot import handler module"),
            ("tests.integration.handlers:nope", "has no attribute 'nope'"),
            ("tests.integration.handlers:NOT_CALLABLE", "is not callable"),
        ],
    )
    def test_bad_handler_paths_are_refused(self, path: str, message: str) -> None:
        with pytest.raises(WorkerConfigError, match=message):
            handler_load(path)

    def test_handler_path_loads_the_function(self) -> None:
        assert handler_load("tests.integration.handlers:quick").__name__ == "quick"


class WorkerFlagsTests:
    def test_flags_written_by_worker_argv_parse_back_to_the_same_config(self) -> None:
        values: dict[str, Any] = {
            "stream": "s", "group": "g", "handler": "tests.integration.handlers:quick",
            "consumer": "c1", "batch": 7, "concurrency": 3, "block_ms": 100,
            "min_idle_ms": 500, "max_deliveries": 2, "reclaim_interval_ms": 50,
            "group_start": "0", "grace_seconds": 1.5,
        }  # fmt: skip
        argv = worker_argv(**values)

        config = worker_config_from_options(parsed(argv), url=URL)

        assert argv[:6] == ["--stream", "s", "--group", "g", "--handler", values["handler"]]
        assert config == WorkerConfig(**(values | {"handler": quick}), url=URL)

    def test_defaults_of_the_flags_are_the_config_defaults(self) -> None:
        options = parsed(["--stream", "s", "--group", "g", "--handler",
                          "tests.integration.handlers:quick", "--consumer", "c1"])  # fmt: skip
        config = worker_config_from_options(options, url=URL)
        assert config == WorkerConfig(stream="s", group="g", handler=quick, consumer="c1", url=URL)
        assert config.parser is fields_parse

    def test_settings_without_a_flag_are_not_flags(self) -> None:
        with pytest.raises(TypeError, match="no queue_worker flag for backoff_cap_s, url"):
            worker_argv(stream="s", url=URL, backoff_cap_s=1.0)
        with pytest.raises(SystemExit):
            parsed(["--stream", "s", "--group", "g", "--handler", "x:y", "--url", URL])

    def test_a_bad_handler_path_is_a_config_error_when_the_config_is_built(self) -> None:
        options = parsed(["--stream", "s", "--group", "g", "--handler", "tests.nowhere:f"])
        with pytest.raises(WorkerConfigError, match="cannot import handler module"):
            worker_config_from_options(options, url=URL)
