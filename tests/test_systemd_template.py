"""The template units for several daemons on one host (issue 15, Operations):
``systemd/sluicegate@.service`` and ``sluicegate@.socket``.

The template is checked the way tests/test_systemd.py checks the single unit
(``systemd-analyze verify`` and ``security`` on an instance, ``a``), kept in
step with it line by line (the hardening above all), and held against
config/instance.toml, the example config of instance ``a``. Two instances are
then run as systemd would run them: each with its passed socket and its own
state directory, both on one PostgreSQL database.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, metric, parse_metrics, wait_until
from tests.test_systemd import (
    UNITS,
    ActivatedDaemon,
    _sluice_executable,
    _unit_value,
    analyze,
    needs_analyze,
)

SERVICE = UNITS / "sluicegate@.service"
SOCKET = UNITS / "sluicegate@.socket"
INSTANCE_CONFIG = UNITS.parent / "config" / "instance.toml"

#: Settings in which the template differs from the single unit: every one names
#: the instance (``%i``) or orders it after the database.
PER_INSTANCE = {
    "sluicegate@.service": {"Description", "Requires", "After", "Wants", "ExecStart",
                            "StateDirectory", "Also"},
    "sluicegate@.socket": {"Description", "ListenStream", "Service"},
}  # fmt: skip


def _settings(unit: Path) -> Counter[tuple[str, str, str]]:
    """``(section, key, value)`` of every setting of ``unit`` (comments skipped)."""
    section = ""
    found: Counter[tuple[str, str, str]] = Counter()
    for line in unit.read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found[(section, key, value)] += 1
    return found


def _instance(value: str, name: str = "a") -> str:
    return value.replace("%i", name)


@pytest.mark.parametrize(("template", "single"), [
    (SERVICE, UNITS / "sluicegate.service"), (SOCKET, UNITS / "sluicegate.socket"),
])  # fmt: skip
def test_the_template_is_the_single_unit_but_for_the_instance(template: Path, single: Path):
    """Same hardening, limits and signals: only the per-instance settings differ."""
    ours, theirs = _settings(template), _settings(single)
    differing = {key for _section, key, _value in (ours - theirs) + (theirs - ours)}
    assert differing == PER_INSTANCE[template.name], differing
    for key in PER_INSTANCE[template.name] - {"Description", "Wants", "After"}:
        assert "%i" in _unit_value(template, key), key


def test_the_template_and_the_instance_config_agree():
    from daemon.config import load_config

    config = load_config(INSTANCE_CONFIG)
    assert config.warnings == ()
    exec_start = _unit_value(SERVICE, "ExecStart").split()
    assert exec_start[1:] == ["serve", "--config", "/etc/sluicegate/%i.toml"]
    assert "/etc/sluicegate/a.toml" in INSTANCE_CONFIG.read_text()  # where it is copied to
    state = _instance(_unit_value(SERVICE, "StateDirectory"))
    assert config.daemon.state_dir == "/var/lib/" + state
    assert config.daemon.socket == _instance(_unit_value(SOCKET, "ListenStream"))
    assert _unit_value(SOCKET, "Service") == "sluicegate@%i.service"
    assert _unit_value(SERVICE, "Requires") == "sluicegate@%i.socket"
    assert config.daemon.postgres_dsn() is not None  # the point of several daemons
    assert config.daemon.name and config.daemon.name.endswith("-a")
    # Not the default port: one daemon of a host has that one.
    assert config.daemon.http and config.daemon.http != "127.0.0.1:7890"


@pytest.mark.e2e
@needs_analyze
def test_the_template_verifies_for_an_instance(tmp_path: Path):
    program = _unit_value(SERVICE, "ExecStart").split()[0]
    for unit in (SERVICE, SOCKET):
        (tmp_path / unit.name).write_text(unit.read_text().replace(program, _sluice_executable()))
    instances = [str(tmp_path / "sluicegate@a.service"), str(tmp_path / "sluicegate@a.socket")]
    copy = subprocess.run([analyze, "verify", *instances], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert copy.returncode == 0, copy.stdout + copy.stderr
    assert copy.stdout.strip() == "" and copy.stderr.strip() == "", copy.stdout + copy.stderr

    # The shipped template: the missing program is the one complaint allowed.
    instances = [str(UNITS / "sluicegate@a.service"), str(UNITS / "sluicegate@a.socket")]
    shipped = subprocess.run([analyze, "verify", *instances], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    complaints = [line for line in (shipped.stdout + shipped.stderr).splitlines() if line.strip()]
    assert all(f"Command {program} is not executable" in line for line in complaints), complaints


@pytest.mark.e2e
@needs_analyze
def test_the_template_exposure_score_is_at_most_2():
    result = subprocess.run(
        [analyze, "security", "--offline=yes", str(UNITS / "sluicegate@a.service")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for sluicegate@a\.service: (\d+\.\d+)",
                      result.stdout)  # fmt: skip
    assert match, result.stdout + result.stderr
    assert float(match[1]) <= 2.0, result.stdout


@pytest.mark.e2e
@pytest.mark.postgres
def test_two_instances_of_one_host_share_the_database(pg_dsn):
    """As sluicegate@a and sluicegate@b run: each on the socket systemd passed
    it, with its own state directory, name and HTTP port, both on one database."""
    ports = {"a": free_port(), "b": free_port()}
    instances: dict[str, ActivatedDaemon] = {}
    # Short paths: unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="sg-", dir="/tmp") as root:
        try:
            for name, port in ports.items():
                (Path(root) / name).mkdir()
                daemon = instances[name] = ActivatedDaemon(
                    Path(root) / name, f'database = "{pg_dsn}"\nname = "host1-{name}"\n',
                    http=f"127.0.0.1:{port}",
                )  # fmt: skip
                daemon.start()
                daemon.wait_notify("READY=1")
            _one_queue(instances["a"], instances["b"])
            wait_until(lambda: sum(_leading(ports).values()) == 1, timeout=30,
                       what="one retention leader of the two")  # fmt: skip
            for daemon in instances.values():
                assert daemon.stop() == 0
                assert daemon.socket.exists()  # systemd's socket stays
        finally:
            for daemon in instances.values():
                daemon.close()


def _one_queue(a: ActivatedDaemon, b: ActivatedDaemon) -> None:
    """Enqueued through ``a``, claimed through ``b``."""
    client = a.client()
    try:
        job = client.ok("enqueue", queue="q", type="t", payload={})["job"]
    finally:
        client.close()
    client = b.client()
    try:
        assert client.ok("claim_next", queues=["q"])["jobs"][0]["job"]["id"] == job["id"]
    finally:
        client.close()


def _leading(ports: dict[str, int]) -> dict[str, float]:
    """Each instance's ``sluicegate_leader{role="retention"}``, by its ``daemon`` label."""
    found = {}
    for name, port in ports.items():
        samples = parse_metrics(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        value = metric(samples, "sluicegate_leader", role="retention", daemon=f"host1-{name}")
        found[name] = value or 0
    return found
