"""A real OpenID Connect provider on loopback for the SSO tests: panva's oidc-provider
(the certified reference implementation) run by node from tests/access/provider.

Its users (provider.mjs): olivia (group ackboard-operators), victor (ackboard-viewers),
nora (marketing only) and late (operators, but its ID token arrives expired). Any
password logs them in at the provider's own login page, then its consent page.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.redis_server import free_port

PROVIDER_DIR = Path(__file__).resolve().parent / "provider"
HOW_TO_GET_IT = (
    "The SSO tests run a real OpenID Connect provider with node: install Node.js (20 or "
    "later) and run `npm ci` in tests/access/provider (.ci/run does both)."
)


class ProviderFailed(RuntimeError):
    pass


@dataclass
class OidcProvider:
    """``node provider.mjs`` on a free port, for one client whose callback is ``redirect_uri``."""

    redirect_uri: str
    client_id: str = "ackboard"
    client_secret: str = "test-client-secret-0123456789"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> OidcProvider:
        node = shutil.which("node")
        if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
            raise ProviderFailed(HOW_TO_GET_IT)
        argv = [node, "provider.mjs", str(self.port), self.redirect_uri, self.client_id]
        # Its output goes to a file, not a pipe nobody reads once it is up.
        self.log = tempfile.NamedTemporaryFile(prefix="ackboard-oidc-", suffix=".log")  # noqa: SIM115 - open for the process's life, closed in stop()
        self.proc = subprocess.Popen(
            [*argv, self.client_secret],
            cwd=PROVIDER_DIR,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if b"ready" in Path(self.log.name).read_bytes():
                return self
            time.sleep(0.05)  # poll: until it says ready, exits or the deadline passes
        output = Path(self.log.name).read_text(errors="replace")
        self.stop()
        raise ProviderFailed("the OIDC provider did not start:\n" + output)

    def set_groups(self, user: str, groups: list[str]) -> None:
        """What an administrator does at the provider: change ``user``'s groups."""
        query = urllib.parse.urlencode({"user": user, "groups": ",".join(groups)})
        request = urllib.request.Request(f"{self.issuer}/_test/groups?{query}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 204

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None
