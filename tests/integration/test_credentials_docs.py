"""README's Credentials section runs as written against servers with authentication and
authorization on: the Python block, then the shell block (through the CLI)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from orbitmq.config import NamesrvConfig
from orbitmq.testing import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Credentials\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_credentials_section_runs_as_written(tmp_path: Path) -> None:
    section = _section()
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    (code,) = [text for lang, text in blocks if lang == "python"]
    shell = [text for lang, text in blocks if not lang][-1]
    init = json.dumps({"username": "admin", "password": "admin-secret"})
    assert f"'{init}'" in section  # the server's start line: the same init user
    auth = {"authentication_enabled": True, "authorization_enabled": True,
            "init_authentication_user": init}
    ns = NamesrvConfig(listen_port=0, auth_config_path=str(tmp_path / "namesrv-auth.json"),
                       **auth)  # type: ignore[arg-type]
    with EmbeddedCluster(tmp_path, namesrv_config=ns, **auth) as cluster:
        assert 'namesrv = "127.0.0.1:9876"' in code
        code = code.replace('namesrv = "127.0.0.1:9876"', f'namesrv = "{cluster.namesrv}"')
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ["['Topic:Payments', 'Group:ledger']",
                                           "SendStatus.OK", "b'42 EUR'"]

        env = {**os.environ, "ORBITMQ_NAMESRV_ADDR": cluster.namesrv}
        env.pop("ORBITMQ_ACCESS_KEY", None)
        env.pop("ORBITMQ_SECRET_KEY", None)
        script = shell.replace(".venv/bin/orbitmq", f"{sys.executable} -m orbitmq.cli.main")
        out = subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                             timeout=120, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("user billing created on ")
        assert lines[1].startswith("ACL of User:billing created on ")
        assert "body=42 EUR" in lines[2]
        assert "billing-secret" not in out.stdout + out.stderr
