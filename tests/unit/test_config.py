"""daemon/config.py: the TOML file into attrs classes; every error names file and field."""

from __future__ import annotations

import hashlib
import tomllib

import pytest

from daemon.config import ENV_CONFIG, Config, ConfigError, load_config, parse_config

SHA = hashlib.sha256(b"s3cret").hexdigest()


def _problems(data, source="sluicegate.toml") -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source)
    assert info.value.source == source
    for line in str(info.value).splitlines():
        assert line.startswith(f"{source}: ")
    return info.value.problems


def test_empty_document_is_the_defaults():
    config = parse_config({}, "x.toml")
    assert config.source == "x.toml"
    assert config.daemon.lease == 60_000
    assert config.daemon.max_frame_bytes == 1_048_576
    assert config.daemon.synchronous == "normal"
    assert config.retention.completed_ttl == 7 * 86_400_000
    assert config.retention.dead_ttl == 30 * 86_400_000
    assert config.open_mode and config.tokens == ()
    assert config.warnings == ()


def test_durations_in_the_file():
    config = parse_config(
        {"daemon": {"lease": "30s", "rollup_interval": "2h", "shutdown_grace": 500},
         "retention": {"completed_ttl": "7d", "dead_ttl": "5m"}},
        "x.toml",
    )  # fmt: skip
    assert config.daemon.lease == 30_000
    assert config.daemon.rollup_interval == 7_200_000
    assert config.daemon.shutdown_grace == 500
    assert config.retention.completed_ttl == 604_800_000
    assert config.retention.dead_ttl == 300_000


def test_full_example_of_the_protocol_parses():
    config = parse_config(
        {
            "daemon": {"state_dir": "/var/lib/sluicegate", "http": "", "enforce": False,
                       "synchronous": "full", "metrics_token": "m"},
            "retention": {"batch": 10},
            "tokens": [{"name": "billing-worker", "sha256": SHA, "namespace": "billing",
                        "grants": ["produce", "consume"], "queues": ["*"]}],
            "quotas": {"billing": {"max_pending": 10000, "on_excess": "drop"}},
            "budgets": {"billing": {"image-service": {"allocation": 10000, "strategy": {
                "type": "time_based", "duration_ms": 3_600_000}}}},
            "policies": {"billing": {"investigations": {"max_claims_per_window": 100}}},
        },
        "x.toml",
    )  # fmt: skip
    assert not config.open_mode
    assert config.tokens[0].namespace == "billing"
    assert config.tokens[0].grants == ("produce", "consume")
    assert config.daemon.synchronous == "full"
    assert config.quotas["billing"]["max_pending"] == 10000


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"daemon": {"lease": "5x"}}, "daemon.lease: expected a duration"),
        ({"daemon": {"lease": True}}, "daemon.lease: expected a duration"),
        ({"daemon": {"lease": -5}}, "daemon.lease: a duration cannot be negative"),
        ({"retention": {"dead_ttl": "1w"}}, "retention.dead_ttl: expected a duration"),
        ({"daemon": {"max_budgets": "5"}}, "daemon.max_budgets: expected an integer"),
        ({"daemon": {"max_frame_bytes": 2048.0}}, "daemon.max_frame_bytes: expected an integer"),
        ({"daemon": {"enforce": 1}}, "daemon.enforce: expected a boolean, got an integer"),
        ({"daemon": {"state_dir": 5}}, "daemon.state_dir: expected a string"),
        ({"daemon": {"synchronous": "off"}}, "daemon.synchronous: "),
        ({"tokens": [{"token": "x"}]}, "tokens[0].name: name is required"),
        ({"tokens": [{"name": "a", "token": 5}]}, "tokens[0].token: expected a string"),
        (
            {"tokens": [{"name": "a", "token": "x"}, {"name": "b", "token": "y", "grants": [1]}]},
            "tokens[1].grants[0]: expected a string",
        ),
    ],
)
def test_type_errors_name_the_field_path(data, expected):
    problems = _problems(data)
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"daemon": {"leas": "5s"}}, "daemon.leas: unknown field 'leas'; did you mean 'lease'?"),
        ({"deamon": {}}, "deamon: unknown field 'deamon'; did you mean 'daemon'?"),
        (
            {"retention": {"batchsize": 5}},
            "retention.batchsize: unknown field 'batchsize'; did you mean 'batch'?",
        ),
        (
            {"tokens": [{"name": "a", "token": "x", "namespac": "b"}]},
            "tokens[0].namespac: unknown field 'namespac'; did you mean 'namespace'?",
        ),
        ({"daemon": {"zzzz": 1}}, "daemon.zzzz: unknown field 'zzzz'"),
        (
            {"tokens": [{"name": "a", "token": "x", "grant": ["produce"]}]},
            "tokens[0].grant: unknown field 'grant'; did you mean 'grants'?",
        ),
    ],
)
def test_unknown_keys_are_refused_with_a_hint(data, expected):
    assert expected in _problems(data)


def test_unknown_key_without_a_close_match_has_no_hint():
    (problem,) = _problems({"daemon": {"zzzz": 1}})
    assert "did you mean" not in problem


def test_several_problems_are_all_reported():
    problems = _problems({"daemon": {"leas": 1, "lease": "x", "http": 5}})
    assert len(problems) == 3, problems


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"daemon": {"max_budgets": -1}}, "daemon.max_budgets"),
        ({"daemon": {"lease": 0}}, "daemon.lease"),
        ({"daemon": {"max_frame_bytes": 10}}, "daemon.max_frame_bytes"),
        ({"retention": {"batch": 0}}, "retention.batch"),
        (
            {"tokens": [{"name": "a", "token": "x", "grants": ["produce", "fly"]}]},
            "tokens[0].grants",
        ),
        ({"tokens": [{"name": "a", "token": "x", "namespace": "bad ns"}]}, "tokens[0].namespace"),
        ({"tokens": [{"name": "a", "sha256": "abc"}]}, "tokens[0].sha256"),
    ],
)
def test_validated_fields_are_named_in_errors(data, path):
    problems = _problems(data)
    assert any(p.startswith(f"{path}: ") for p in problems), problems


def test_validated_fields_are_refused():
    # Whatever the path says, the bad value is refused and explained.
    problems = _problems({"daemon": {"max_budgets": -1}})
    assert "daemon.max_budgets: must be at least 0, got -1" in str(problems)
    assert "unknown grant 'fly'" in str(
        _problems({"tokens": [{"name": "a", "token": "x", "grants": ["fly"]}]})
    )
    assert "sha256: must be 64 hex" in str(_problems({"tokens": [{"name": "a", "sha256": "ab"}]}))


def test_token_needs_exactly_one_of_sha256_or_token():
    assert _problems({"tokens": [{"name": "a"}]}) == [
        "tokens[0]: give exactly one of sha256 or token"
    ]
    assert _problems({"tokens": [{"name": "a", "token": "x", "sha256": SHA}]}) == [
        "tokens[0]: give exactly one of sha256 or token"
    ]


def test_sha256_token_is_used_as_is_and_lowercased():
    config = parse_config({"tokens": [{"name": "a", "sha256": SHA.upper()}]}, "x.toml")
    assert config.tokens[0].digest() == SHA
    assert config.warnings == ()


def test_plain_token_is_hashed_and_warned_about():
    config = parse_config({"tokens": [{"name": "dev", "token": "s3cret"}]}, "x.toml")
    assert config.tokens[0].digest() == SHA
    assert config.warnings == ("tokens[0] (dev): plain token in the config file; use sha256",)


def test_the_same_token_twice_is_refused_whichever_form():
    problems = _problems({"tokens": [{"name": "a", "token": "s3cret"},
                                     {"name": "b", "sha256": SHA}]})  # fmt: skip
    assert problems == ["tokens[1]: the same token is configured twice"]


def test_defaults_when_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    config = load_config()
    assert config == Config()
    assert config.source == "<defaults>"
    assert config.open_mode
    assert str(config.daemon.database_path()) == "sluicegate-data/sluicegate.db"
    assert str(config.daemon.socket_path()) == "sluicegate-data/sluicegate.sock"


def test_file_in_cwd_is_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    (tmp_path / "sluicegate.toml").write_text('[daemon]\nlease = "5s"\n')
    config = load_config()
    assert config.daemon.lease == 5_000
    assert config.source == "sluicegate.toml"


def test_env_then_explicit_path_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sluicegate.toml").write_text('[daemon]\nlease = "5s"\n')
    env = tmp_path / "env.toml"
    env.write_text('[daemon]\nlease = "6s"\n')
    explicit = tmp_path / "explicit.toml"
    explicit.write_text('[daemon]\nlease = "7s"\n')
    monkeypatch.setenv(ENV_CONFIG, str(env))
    assert load_config().daemon.lease == 6_000
    assert load_config(explicit).daemon.lease == 7_000


def test_missing_explicit_file_is_an_error(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    assert info.value.problems[0].startswith("cannot read")


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[daemon\nlease = 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: not valid TOML")


def test_not_utf8_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(b'[daemon]\nhttp = "\xff"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_file_errors_name_file_and_field(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[daemon]\nlease = "forever"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: daemon.lease: expected a duration")


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"tokens": [{"name": "a", "token": "x", "queues": "billing"}]}, "tokens[0].queues"),
        ({"tokens": [{"name": "a", "token": "x", "grants": "produce"}]}, "tokens[0].grants"),
        ({"tokens": {"name": "a", "token": "x"}}, "tokens"),
    ],
)
def test_an_array_field_takes_only_an_array(data, path):
    problems = _problems(data)
    assert any(p.startswith(f"{path}: expected an array") for p in problems), problems


def test_a_section_that_is_not_a_table_is_refused():
    assert _problems({"daemon": 5})[0].startswith("daemon: ")
    assert _problems({"quotas": 5})[0].startswith("quotas: ")


def test_provisioned_budgets_are_validated_into_specs():
    config = parse_config(
        {
            "budgets": {
                "billing": {
                    "image-service": {
                        "allocation": 10000,
                        "strategy": {"type": "time_based", "duration_ms": "1h", "burst": 500},
                    },
                    "schema-bot": {"allocation": 10, "strategy": {"type": "while_in_flight"}},
                    "llm": {
                        "allocation": 10,
                        "strategy": {"type": "while_in_flight", "reserve": {"gold": 4}},
                    },
                }
            }
        },
        "f.toml",
    )
    specs = config.budget_specs["billing"]
    assert specs["image-service"].strategy.duration_ms == 3_600_000
    assert specs["image-service"].cap == 500
    assert specs["schema-bot"].max_cost() == 10
    assert specs["llm"].strategy.reserve == {"gold": 4}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"allocation": 0, "strategy": {"type": "while_in_flight"}}, "x.allocation: must be"),
        ({"allocation": 3}, "x.strategy: must be a table"),
        ({"allocation": 3, "strategy": {"type": "nope"}}, "x.strategy.type: must be"),
        ({"allocation": 3, "strategy": {"type": "time_based"}}, "duration_ms must be"),
        (
            {"allocation": 3, "strategy": {"type": "time_based", "duration_ms": "x"}},
            "x.strategy.duration_ms",
        ),
        ({"allocation": 3, "strategy": {"type": "while_in_flight", "burst": 2}}, "takes neither"),
        ({"allocation": 3, "strategy": {"type": "while_in_flight"}, "cost": 1}, "x.cost: unknown"),
        (
            {"allocation": 3, "strategy": {"type": "while_in_flight", "reserve": {"g": 2, "h": 2}}},
            "x.strategy.reserve: strategy.reserve reserves 4 tokens in all, more than allocation 3",
        ),
        (
            {
                "allocation": 3,
                "strategy": {"type": "time_based", "duration_ms": "1h", "reserve": {"g": 1}},
            },
            "x.strategy.reserve: strategy.reserve applies to while_in_flight budgets only",
        ),
    ],
)
def test_bad_provisioned_budgets_name_the_field(body, problem):
    with pytest.raises(ConfigError) as info:
        parse_config({"budgets": {"billing": {"x": body}}}, "f.toml")
    assert any(problem in p and p.startswith("budgets.billing.x") for p in info.value.problems), (
        info.value.problems
    )


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "daemon": {"leese": "5s"},
                "budgets": {"d": {"x": {"allocation": 0, "strategy": {"type": "while_in_flight"}}}},
            },
            "f.toml",
        )
    assert info.value.problems == [
        "daemon.leese: unknown field 'leese'; did you mean 'lease'?",
        "budgets.d.x.allocation: must be an integer of at least 1",
    ]


def test_admin_write_limits_default_and_parse():
    config = parse_config({}, "x.toml")
    assert (config.daemon.admin_write_rate, config.daemon.admin_write_burst) == ("1/s", 10)
    token = {"name": "deploy", "sha256": SHA, "write_rate": "20/s", "write_burst": 40}
    config = parse_config(
        {"daemon": {"admin_write_rate": "unlimited", "admin_write_burst": 3}, "tokens": [token]},
        "x.toml",
    )
    assert config.daemon.admin_write_rate == "unlimited"
    assert (config.tokens[0].write_rate, config.tokens[0].write_burst) == ("20/s", 40)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"daemon": {"admin_write_rate": "fast"}}, "daemon.admin_write_rate: must be"),
        ({"daemon": {"admin_write_rate": "0/s"}}, "daemon.admin_write_rate: must be"),
        ({"daemon": {"admin_write_rate": 5}}, "daemon.admin_write_rate: expected a string"),
        ({"daemon": {"admin_write_burst": 0}}, "daemon.admin_write_burst: must be at least 1"),
        ({"tokens": [{"name": "t", "sha256": SHA, "write_rate": "20/x"}]},
         "tokens[0].write_rate: must be"),
        ({"tokens": [{"name": "t", "sha256": SHA, "write_burst": 0}]},
         "tokens[0].write_burst: must be at least 1"),
    ],
)  # fmt: skip
def test_bad_admin_write_limits_name_the_field(data, problem):
    (found,) = _problems(data)
    assert found.startswith(problem), found


def test_a_policy_table_takes_the_group_fields():
    """docs/fairness.md: the config file provisions fairness like any policy field."""
    text = """
[policies.default.tiers]
max_in_flight = 10
fairness = "round_robin"
weights = { gold = 3, "customer 42" = 2 }
max_in_flight_per_group = 5
group_limits = { gold = 8 }
min_in_flight = { gold = 2 }

[policies.default.over]
max_in_flight = 3
min_in_flight = { gold = 4 }
"""
    config = parse_config(tomllib.loads(text), "x.toml")
    policy, _table = config.policy_tables[("default", "tiers")]
    assert policy is not None and policy.groups.round_robin
    assert policy.groups.weights == {"customer 42": 2, "gold": 3}
    assert (policy.groups.cap("gold"), policy.groups.cap("x")) == (8, 5)
    assert policy.groups.min_in_flight == {"gold": 2}
    assert config.policy_tables[("default", "over")][0] is None  # fails closed
    (problem,) = config.policy_problems
    assert problem.startswith("policies.default.over.min_in_flight: ") and "4" in problem
