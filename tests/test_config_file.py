"""The shipped, annotated config file: it parses, and what it says is true.

Its convention: ``#key = value`` is a setting left at its built-in default and
``#[section]`` an example section; prose comments have a space after ``#``.
"""

from __future__ import annotations

import hashlib
import re
import tomllib

import attrs

from daemon.config import DaemonConfig, RetentionConfig, load_config, parse_config
from tests.support import ROOT

SHIPPED = ROOT / "config" / "sluicegate.toml"
#: Settings the shipped file sets on purpose for a systemd install.
SYSTEMD_VALUES = {
    "state_dir": "/var/lib/sluicegate",
    "socket": "/run/sluicegate/sluicegate.sock",
}
COMMENTED_CODE = re.compile(r"^#(?=[\[A-Za-z_])")


def _uncommented() -> str:
    """The file with every commented-out setting and example section enabled."""
    return "\n".join(COMMENTED_CODE.sub("", line) for line in SHIPPED.read_text().splitlines())


def _section_keys(text: str, section: str) -> dict[str, str]:
    """``key -> raw value`` of the (possibly commented) settings in ``[section]``."""
    keys: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        line = COMMENTED_CODE.sub("", line)
        if header := re.match(r"^\[+([^\]]+)\]+", line):
            current = header[1]
        elif current == section and (m := re.match(r"^([a-z_]+) = (.+)$", line)):
            keys[m[1]] = m[2]
    return keys


def test_the_shipped_file_loads():
    config = load_config(SHIPPED)
    assert config.warnings == ()
    assert config.open_mode  # examples stay commented out
    for field, value in SYSTEMD_VALUES.items():
        assert getattr(config.daemon, field) == value
    # Everything else it leaves at the built-in defaults.
    defaults = DaemonConfig()
    for field in attrs.fields(DaemonConfig):
        if field.name not in SYSTEMD_VALUES:
            assert getattr(config.daemon, field.name) == getattr(defaults, field.name), field.name
    assert config.retention == RetentionConfig()


def test_every_setting_is_documented():
    text = SHIPPED.read_text()
    for cls, section in ((DaemonConfig, "daemon"), (RetentionConfig, "retention")):
        documented = _section_keys(text, section)
        names = {f.name for f in attrs.fields(cls)}
        assert set(documented) == names, (section, names ^ set(documented))


def test_the_defaults_it_states_are_the_built_in_ones():
    text = SHIPPED.read_text()
    lines = []
    for section in ("daemon", "retention"):
        lines.append(f"[{section}]")
        for key, value in _section_keys(text, section).items():
            if key not in SYSTEMD_VALUES:
                lines.append(f"{key} = {value}")
    stated = tomllib.loads("\n".join(lines))
    config = parse_config(stated, "stated defaults")
    assert config.daemon == DaemonConfig()
    assert config.retention == RetentionConfig()
    # The prose names the built-in defaults of the two values set for systemd.
    assert 'Built-in default: "./sluicegate-data"' in text
    assert DaemonConfig().state_dir == "./sluicegate-data"
    assert DaemonConfig().socket == ""


def test_the_commented_examples_parse():
    config = parse_config(tomllib.loads(_uncommented()), "examples")
    (token,) = config.tokens
    assert token.namespace == "billing" and token.grants == ("produce", "consume")
    # The comment says which token the example hash belongs to.
    said = re.search(r'hash is of the token "([^"]+)"', SHIPPED.read_text())
    assert said and hashlib.sha256(said[1].encode()).hexdigest() == token.sha256
    assert config.quotas["billing"]["max_pending"] == 10000
    assert config.budgets["billing"]["image-service"]["allocation"] == 10000
    assert config.policies["billing"]["investigations"]["window"]["period"] == "day"
