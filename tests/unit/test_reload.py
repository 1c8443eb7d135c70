"""daemon/reload.py (what a reload may change), daemon/config_watch.py (has the file
changed?) and the settings watcher's checks, on virtual time."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
import trio

from actors.watcher import SettingsWatcher
from daemon.config import Config, parse_config
from daemon.config_watch import ConfigFileWatch
from daemon.reload import LIVE_DAEMON_KEYS, decide, widens

SHA = hashlib.sha256(b"s3cret").hexdigest()
TOKEN = {"name": "a", "namespace": "A", "sha256": SHA}


def cfg(daemon: dict[str, Any] | None = None, tokens: list[dict[str, Any]] | None = None,
        **sections: Any) -> Config:  # fmt: skip
    data: dict[str, Any] = {"daemon": daemon or {}, **sections}
    if tokens:
        data["tokens"] = tokens
    return parse_config(data, "s.toml")


# -- decide: refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fresh",
    [
        cfg(),  # an emptied file
        cfg({"lease": "30s"}),  # no [[tokens]] left
    ],
)
def test_tokens_mode_to_open_mode_is_refused(fresh):
    decision = decide(cfg(tokens=[TOKEN]), fresh)
    assert decision.config is None
    [why] = decision.refusals
    assert "open mode" in why and "[[tokens]]" in why


def test_open_mode_may_stay_open_and_tokens_may_be_added_or_revoked():
    assert decide(cfg(), cfg()).config == cfg()
    assert decide(cfg(), cfg(tokens=[TOKEN])).refusals == ()  # raising security
    two = [TOKEN, {"name": "b", "namespace": "B", "sha256": "b" * 64}]
    revoked = decide(cfg(tokens=two), cfg(tokens=[TOKEN]))
    assert revoked.config is not None and len(revoked.config.tokens) == 1


def test_removing_metrics_token_is_refused_setting_or_rotating_it_is_not():
    on = cfg({"metrics_token": "m1"})
    [why] = decide(on, cfg()).refusals
    assert "daemon.metrics_token" in why
    assert decide(on, cfg({"metrics_token": "m2"})).config == cfg({"metrics_token": "m2"})
    assert decide(cfg(), on).config == on


def test_every_refusal_is_named_and_nothing_applies():
    running = cfg({"metrics_token": "m", "http": "127.0.0.1:7890"}, [TOKEN])
    decision = decide(running, cfg({"http": "0.0.0.0:7890", "lease": "1s"}))
    assert decision.config is None
    assert [r.split(" ", 1)[0] for r in decision.refusals] == [
        "no", "daemon.metrics_token", "daemon.http",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "wider"),
    [
        ("127.0.0.1:7890", "0.0.0.0:7890", True),
        ("127.0.0.1:7890", ":7890", True),
        ("127.0.0.1:7890", "[::]:7890", True),
        ("127.0.0.1:7890", "10.0.0.5:7890", True),
        ("10.0.0.5:7890", "10.0.0.6:7890", True),  # another interface
        ("10.0.0.5:7890", "0.0.0.0:7890", True),
        ("", "127.0.0.1:7890", True),  # off to on
        ("unix:/run/s.sock", "127.0.0.1:7890", False),
        ("127.0.0.1:7890", "example.org:7890", True),
        ("127.0.0.1:7890", "127.0.0.1:7891", False),  # another port: a restart, not wider
        ("127.0.0.1:7890", "[::1]:7890", False),
        ("127.0.0.1:7890", "localhost:7890", False),
        ("0.0.0.0:7890", "127.0.0.1:7890", False),
        ("127.0.0.1:7890", "", False),
        ("10.0.0.5:7890", "10.0.0.5:7891", False),
    ],
)
def test_widens(old, new, wider):
    assert widens(old, new) is wider


# -- decide: keys that need a restart --------------------------------------------------------


def test_restart_only_keys_keep_their_running_values_and_the_rest_applies():
    running = cfg({"socket": "/run/a.sock", "http": "127.0.0.1:1", "lease": "60s"}, [TOKEN])
    fresh = cfg(
        {"socket": "/run/b.sock", "http": "127.0.0.1:2", "database": "/x.db", "lease": "5s",
         "enforce": False},
        [TOKEN, {"name": "b", "namespace": "B", "sha256": "b" * 64}],
        quotas={"A": {"max_pending": 5}},
    )  # fmt: skip
    decision = decide(running, fresh)
    assert decision.refusals == ()
    assert decision.needs_restart == ("daemon.database", "daemon.http", "daemon.socket")
    taken = decision.config
    assert taken is not None
    assert (taken.daemon.socket, taken.daemon.http, taken.daemon.database) == (
        "/run/a.sock", "127.0.0.1:1", "",
    )  # fmt: skip
    assert (taken.daemon.lease, taken.daemon.enforce) == (5000, False)
    assert len(taken.tokens) == 2 and "A" in taken.quota_tables


def test_a_daemon_key_not_known_to_be_live_needs_a_restart():
    # state_dir, synchronous, ... and any key added later until it is listed as live.
    decision = decide(cfg(), cfg({"state_dir": "/elsewhere", "synchronous": "full"}))
    assert decision.needs_restart == ("daemon.state_dir", "daemon.synchronous")
    assert decision.config is not None and decision.config.daemon == cfg().daemon
    assert {"state_dir", "database", "socket", "http", "synchronous"}.isdisjoint(LIVE_DAEMON_KEYS)


def test_an_unchanged_file_needs_nothing():
    running = cfg({"http": "127.0.0.1:1"}, [TOKEN])
    decision = decide(running, cfg({"http": "127.0.0.1:1"}, [TOKEN]))
    assert decision.config == running and decision.needs_restart == () == decision.refusals


# -- ConfigFileWatch --------------------------------------------------------------------------


def _bump_mtime(path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_an_untouched_file_is_only_statted(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[daemon]\n")
    watch = ConfigFileWatch(path)
    assert watch.reads == 1  # the start: what the daemon loaded
    for _ in range(5):
        assert watch.changed() is False
    assert watch.reads == 1


def test_a_touch_is_read_and_hashed_but_not_a_change(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[daemon]\n")
    watch = ConfigFileWatch(path)
    _bump_mtime(path)
    assert watch.changed() is False
    assert watch.reads == 2
    assert watch.changed() is False and watch.reads == 2


def test_a_new_content_is_a_change_once(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[daemon]\n")
    watch = ConfigFileWatch(path)
    path.write_text("[daemon]\nlease = '5s'\n")
    _bump_mtime(path)
    assert watch.changed() is True
    assert watch.changed() is False


def test_a_missing_file_is_a_change_once_and_its_return_another(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[daemon]\n")
    watch = ConfigFileWatch(path)
    path.unlink()
    assert watch.changed() is True
    assert watch.changed() is False
    path.write_text("[daemon]\n")
    assert watch.changed() is True


def test_an_emptied_file_is_a_change(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[daemon]\n")
    watch = ConfigFileWatch(path)
    path.write_bytes(b"")
    assert watch.changed() is True


def test_no_file_no_watch():
    watch = ConfigFileWatch(None)
    assert watch.changed() is False and watch.reads == 0


# -- SettingsWatcher checks ------------------------------------------------------------------


async def test_the_watcher_runs_its_checks_every_period_before_the_reload(autojump_clock):
    order: list[tuple[str, float]] = []
    watcher = SettingsWatcher(lambda: order.append(("reload", trio.current_time())))

    async def check() -> None:
        order.append(("check", trio.current_time()))

    watcher.add_check(check)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            t0 = trio.current_time()
            await nursery.start(watcher.run)
            await trio.sleep(5)  # virtual time (autojump_clock)
            nursery.cancel_scope.cancel()
    assert [(what, at - t0) for what, at in order] == [
        ("check", 2.0), ("reload", 2.0), ("check", 4.0), ("reload", 4.0),
    ]  # fmt: skip


async def test_a_failing_reload_keeps_the_watcher_and_the_last_settings(autojump_clock, caplog):
    """The store away (a database restarting): the reload fails, is logged once,
    and the next period tries again; the watcher lives on."""
    outcomes = iter([ConnectionError("away"), ConnectionError("away"), None, None])

    def reload() -> None:
        failure = next(outcomes)
        if failure is not None:
            raise failure

    watcher = SettingsWatcher(reload)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(watcher.run)
            await trio.sleep(5)  # virtual time (autojump_clock): two failed periods
            assert (watcher.failures, watcher.reloads) == (2, 0)
            await trio.sleep(4)  # virtual time (autojump_clock): two good ones
            nursery.cancel_scope.cancel()
    assert (watcher.failures, watcher.reloads) == (0, 2)
    assert [r.message.startswith("settings reload failed") for r in caplog.records].count(True) == 1


async def test_a_nudge_runs_the_checks_at_once(autojump_clock):
    seen: list[float] = []
    watcher = SettingsWatcher(lambda: None)

    async def check() -> None:
        seen.append(trio.current_time())

    watcher.add_check(check)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            t0 = trio.current_time()
            await nursery.start(watcher.run)
            await trio.sleep(0.5)
            watcher.nudge()
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    assert [at - t0 for at in seen] == [0.5]
