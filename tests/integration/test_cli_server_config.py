"""Server configuration on the command line: refused values end the command with one line and a
non-zero exit, every flag documents itself, one environment variable name per setting, and a
broker whose name and id another live broker holds exits with one line (issue 13)."""

from __future__ import annotations

import dataclasses
import time
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from orbitmq.cli.config_options import env_var
from orbitmq.cli.main import cli
from orbitmq.cli.servers import broker_cmd, namesrv_cmd, standalone_cmd
from orbitmq.config import BrokerConfig, NamesrvConfig, StoreConfig, field_doc
from orbitmq.testing.process import ServerProcess, standalone_process

EXIT_WAIT_S = 30.0


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


@pytest.mark.parametrize(("args", "words"), [
    (["broker", "--namesrv", "127.0.0.1:9876", "--port", "99999"],
     "listen_port = 99999 is out of range; allowed: 0..65535"),
    (["namesrv", "--port", "-1"], "listen_port = -1 is out of range"),
    (["standalone", "--broker-port", "99999"], "--broker-port = 99999 is out of range"),
    (["broker", "--disk-max-used-space-ratio", "5.0"], "allowed: (0, 1]"),
    (["broker", "--default-topic-queue-nums", "0"], "default_topic_queue_nums = 0"),
    (["broker", "--mapped-file-size-commitlog", "100"], "mapped_file_size_commitlog = 100"),
    (["broker", "--port", "abc"], "listen_port = 'abc' is not an integer"),
    (["broker", "--flush-disk-type", "SOMETIMES"], "ASYNC_FLUSH, SYNC_FLUSH"),
])
def test_refused_flags_end_with_one_line(args: list[str], words: str) -> None:
    line = _one_line_error(CliRunner().invoke(cli, [*args, "--print-config"]))
    assert words in line, line


def test_refused_toml_and_environment_values_name_their_source(tmp_path: Path) -> None:
    toml = tmp_path / "broker.toml"
    toml.write_text("[store]\ndisk_max_used_space_ratio = 5.0\n")
    line = _one_line_error(CliRunner().invoke(cli, ["broker", "--config", str(toml),
                                                    "--print-config"]))
    assert "disk_max_used_space_ratio = 5.0" in line and str(toml) in line
    line = _one_line_error(CliRunner(env={"ORBITMQ_LISTEN_PORT": "70000"}).invoke(
        cli, ["broker", "--print-config"]))
    assert "listen_port = 70000" in line and "environment" in line


def test_one_environment_variable_per_setting() -> None:
    """README's ORBITMQ_FLUSH_DISK_TYPE used to be ignored (only ORBITMQ_STORE_FLUSH_DISK_TYPE
    worked); the variable is now ORBITMQ_ + the flag's name, the old one warns."""
    def effective(env: dict[str, str]) -> tuple[str, str]:
        result = CliRunner(env=env).invoke(cli, ["broker", "--print-config"])
        assert result.exit_code == 0, result.output
        return result.stdout, result.stderr

    out, err = effective({"ORBITMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH"})
    assert 'flush_disk_type = "SYNC_FLUSH"' in out and not err
    out, err = effective({"ORBITMQ_STORE_FLUSH_DISK_TYPE": "SYNC_FLUSH"})
    assert 'flush_disk_type = "SYNC_FLUSH"' in out and "deprecated" in err
    out, _ = effective({"ORBITMQ_NAMESRV_ADDR": "10.0.0.1:9876", "NAMESRV_ADDR": "10.0.0.2:9876"})
    assert 'namesrv_addr = "10.0.0.1:9876"' in out
    out, _ = effective({"NAMESRV_ADDR": "10.0.0.2:9876"})
    assert 'namesrv_addr = "10.0.0.2:9876"' in out


@pytest.mark.parametrize(("command", "cls"), [(broker_cmd, BrokerConfig),
                                              (namesrv_cmd, NamesrvConfig),
                                              (standalone_cmd, BrokerConfig)],
                         ids=["broker", "namesrv", "standalone"])
def test_every_server_flag_has_its_fields_documentation(command: click.Command, cls: type) -> None:
    fields = {f.name: f for f in [*dataclasses.fields(cls), *dataclasses.fields(StoreConfig)]}
    options = [p for p in command.params if isinstance(p, click.Option)]
    assert len([o for o in options if (o.name or "").startswith("cfg_")]) >= 4
    for option in options:
        assert option.help, option.name
        name = (option.name or "").removeprefix("cfg_").rsplit("__", 1)[-1]
        if name in fields:
            assert field_doc(fields[name]).rstrip(".") in option.help, option.name
            assert env_var(name) in option.help, option.name


def test_a_broker_refused_by_the_name_server_exits_with_one_line(tmp_path: Path) -> None:
    """README's second-broker example kept broker_name "broker-a" and took over the first
    broker's route. Now the second broker exits non-zero with one line and the route stays."""
    with standalone_process(str(tmp_path / "a")) as first:
        addresses = first.wait_ready("namesrv", "broker")
        second = ServerProcess(["broker", "--namesrv", addresses["namesrv"], "--port", "0", "--grpc-port", "0",
                                "--store", str(tmp_path / "b")])
        try:
            second.proc.wait(EXIT_WAIT_S)
        finally:
            second.kill()
        out = second.output()
        assert second.proc.returncode == 1, out
        assert "Traceback" not in out
        errors = [line for line in out.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and "refused broker broker-a id 0" in errors[0], out
        assert addresses["broker"] in errors[0]
        assert "registration refused" in first.output()  # the name server said so too
        deadline = time.monotonic() + 10
        result = None
        while time.monotonic() < deadline:
            result = CliRunner().invoke(cli, ["topic", "route", "--topic", "TBW102", "--namesrv",
                                              addresses["namesrv"]])
            if result.exit_code == 0:
                break
            time.sleep(0.05)
        assert result is not None and result.exit_code == 0, result.output if result else None
        assert addresses["broker"] in result.stdout
        third = ServerProcess(["broker", "--namesrv", addresses["namesrv"], "--port", "0", "--grpc-port", "0",
                               "--broker-name", "broker-b", "--store", str(tmp_path / "c")])
        try:
            third.wait_ready("broker")
        finally:
            assert third.stop() == 0


def test_readmes_second_broker_example_gets_its_own_identity(tmp_path: Path) -> None:
    """The example used to keep broker_name "broker-a" (the name server then refused it, or
    before that handed it the first broker's route)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    first, second = [line.removeprefix(".venv/bin/orbitmq ").split() for line in readme.splitlines()
                     if line.startswith(".venv/bin/orbitmq broker --")][:2]
    assert first[-2] == ">" and first[-1] == "broker.toml", first
    toml = tmp_path / "broker.toml"
    result = CliRunner().invoke(cli, first[:-2])
    assert result.exit_code == 0, result.output
    toml.write_text(result.stdout)
    args = [str(toml) if a == "broker.toml" else a for a in second]
    result = CliRunner().invoke(cli, [*args, "--print-config"])
    assert result.exit_code == 0, result.output
    config = tomllib.loads(result.stdout)
    default = BrokerConfig()
    assert config["broker_name"] != default.broker_name
    assert config["listen_port"] != default.listen_port
    assert config["store"]["store_path"] != default.store.store_path


@pytest.mark.parametrize("server", ["namesrv", "broker", "standalone"])
def test_a_server_beyond_loopback_without_authentication_refuses_to_start(
        tmp_path: Path, server: str) -> None:
    """The exposure guard (docs/security.md): one line naming the setting, exit status 1."""
    host = ["--listen-host", "0.0.0.0"]
    args = {"namesrv": ["namesrv", *host, "--port", "0"],
            "broker": ["broker", *host, "--namesrv", "127.0.0.1:9", "--port", "0",
                       "--grpc-port", "0", "--store",
                       str(tmp_path / "b")],
            "standalone": ["standalone", *host, "--namesrv-port", "0", "--broker-port", "0",
                           "--console-port", "0", "--grpc-port", "0", "--store",
                           str(tmp_path / "s")]}[server]
    refused = ServerProcess(args)
    try:
        refused.proc.wait(EXIT_WAIT_S)
    finally:
        refused.kill()
    out = refused.output()
    assert refused.proc.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "authentication_enabled = false" in errors[0], out
    assert "allow_anonymous" in errors[0] and "Traceback" not in out


def test_allow_anonymous_starts_beyond_loopback_with_a_warning(tmp_path: Path) -> None:
    server = ServerProcess(["namesrv", "--listen-host", "0.0.0.0", "--port", "0",
                            "--allow-anonymous", "true"])
    try:
        server.wait_ready("namesrv")
        assert "with authentication off (allow_anonymous = true)" in server.output()
    finally:
        assert server.stop() == 0
