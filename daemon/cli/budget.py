"""``sluice budget list|get|create|set|patch|delete|pause|resume``: the namespace's budgets.

``show`` is another name for ``get``, as everywhere one thing is read.

Each subcommand is one verb (``budget_list``, ``budget_get``, ``budget_create``,
``budget_put``, ``budget_patch``, ``budget_delete``, ``budget_pause``,
``budget_resume``); ``--json`` prints that
verb's result. ``patch`` sends a JSON merge patch of only the options given
(``--burst null`` resets the burst to its default, the allocation).

The table's NEXT REFILL is, for a ``time_based`` budget that is not full, the
local time at which the pool next holds one more whole token if nothing is
debited meanwhile: the daemon's ``state.next_refill_at`` (exact), or computed
here from the other fields when a daemon does not send it; ``full`` when the
pool is at its cap (``burst``, else the allocation); ``-`` for
``while_in_flight``. PAUSED is the local time a pause ends, and its reason
(``-`` when not paused).

``create``/``set`` take ``--reserve GROUP=N`` (repeatable, ``while_in_flight``
only): N tokens of the allocation reserved for a group's jobs, lent to any
group while it has none pending (docs/fairness.md).

``pause KEY --retry-after SECONDS | --until WHEN [--reason TEXT]``: no job
bound to the budget is claimed before then (``WHEN`` is an ISO 8601 instant
with its offset, such as ``2026-12-02T14:00:00+01:00``, or ms since the
epoch); a pause never shortens a longer one. ``resume KEY`` ends it now.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import datetime
from typing import Any

from actors.limits import MAX_TOKENS, NAME_RE
from daemon.cli import dry_run
from daemon.cli.context import Context, UsageError
from daemon.cli.jobs import int_range
from daemon.cli.output import emit_json, local_time, table
from daemon.cli.queue_groups import group_pairs
from daemon.cli.shadow import SHADOW_NOTE, add_enforce_options, enforce_of
from daemon.durations import format_duration_ms, parse_duration_ms

STRATEGIES = ("while_in_flight", "time_based")
HEADERS = ("KEY", "ALLOCATION", "STRATEGY", "AVAILABLE", "IN FLIGHT", "PARKED", "NEXT REFILL",
           "PAUSED")  # fmt: skip
#: ``--burst null`` in ``patch``: reset the burst to its default.
RESET = "null"


def budget_key(text: str) -> str:
    """An argparse type: a budget key (1-128 of ``[A-Za-z0-9._:-]``)."""
    if not NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"bad budget key {text!r}: 1-128 of [A-Za-z0-9._:-]")
    return text


def duration(text: str) -> int:
    """An argparse type: ``500ms``, ``30s``, ``5m``, ``1h``, ``7d`` or integer ms, at least 1 ms."""
    try:
        ms = parse_duration_ms(int(text) if text.strip().isdigit() else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 ms, got {text!r}")
    return ms


def burst_or_null(text: str) -> int | str:
    """An argparse type for ``patch --burst``: a token count, or ``null`` to reset it."""
    if text == RESET:
        return RESET
    return int_range(1, MAX_TOKENS)(text)


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (``30``, ``2.5``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {text!r}")
    return int(value) if value.is_integer() else value


def instant(text: str) -> int:
    """An argparse type: ms since the epoch, or ISO 8601 with an offset (``Z`` too)."""
    if text.isdigit():
        return int(text)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 instant or ms: {text!r}") from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the instant's offset (Z, +01:00): {text!r}")
    return round(at.timestamp() * 1000)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``budget list|get|create|set|patch|delete`` (``show`` is ``get``)."""
    budget = sub.add_parser("budget", parents=[common], help="list, show and change budgets")
    verbs = budget.add_subparsers(
        dest="budget_command", required=True,
        metavar="list|get|show|create|set|patch|delete|pause|resume",
    )  # fmt: skip
    ls = verbs.add_parser("list", parents=[common], help="every budget, by key")
    ls.set_defaults(run=run_list)
    get = verbs.add_parser("get", aliases=["show"], parents=[common], help="one budget")
    get.add_argument("key", metavar="KEY", type=budget_key)
    get.set_defaults(run=run_get)
    for name, help_text, run in (
        ("create", "create a budget (refused if it exists)", run_create),
        ("set", "create a budget or replace its settings", run_set),
    ):
        p = verbs.add_parser(name, parents=[common], help=help_text)
        p.add_argument("key", metavar="KEY", type=budget_key)
        p.add_argument("--allocation", type=int_range(1, MAX_TOKENS), required=True, metavar="N")
        p.add_argument("--strategy", choices=STRATEGIES, required=True)
        p.add_argument("--duration", type=duration, metavar="D", help="time_based: e.g. 1h")
        p.add_argument("--burst", type=int_range(1, MAX_TOKENS), metavar="N", help="time_based")
        p.add_argument("--reserve", action="append", metavar="GROUP=N",
                       help="while_in_flight: tokens reserved for a group's jobs, lent while "
                       "it has none (repeatable)")  # fmt: skip
        add_enforce_options(p)
        if name == "set":
            dry_run.add_option(p)
        p.set_defaults(run=run)
    patch = verbs.add_parser("patch", parents=[common], help="change only the settings given")
    patch.add_argument("key", metavar="KEY", type=budget_key)
    patch.add_argument("--allocation", type=int_range(1, MAX_TOKENS), metavar="N")
    patch.add_argument("--strategy", choices=STRATEGIES)
    patch.add_argument("--duration", type=duration, metavar="D")
    patch.add_argument("--burst", type=burst_or_null, metavar="N|null", help="null resets it")
    add_enforce_options(patch)
    dry_run.add_option(patch)
    patch.set_defaults(run=run_patch)
    delete = verbs.add_parser("delete", parents=[common], help="delete a budget")
    delete.add_argument("key", metavar="KEY", type=budget_key)
    delete.set_defaults(run=run_delete)
    pause = verbs.add_parser("pause", parents=[common], help="claim no job bound to it until then")
    pause.add_argument("key", metavar="KEY", type=budget_key)
    when = pause.add_mutually_exclusive_group(required=True)
    when.add_argument("--retry-after", type=seconds, metavar="SECONDS", help="from now")
    when.add_argument("--until", type=instant, metavar="WHEN", help="ISO 8601, or ms")
    pause.add_argument("--reason", metavar="TEXT", help="why (shown with the pause)")
    pause.set_defaults(run=run_pause)
    resume = verbs.add_parser("resume", parents=[common], help="end a budget's pause now")
    resume.add_argument("key", metavar="KEY", type=budget_key)
    resume.set_defaults(run=run_resume)


def strategy_of(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy object of ``create``/``set``; exit 2 for options of the other type."""
    strategy: dict[str, Any] = {"type": args.strategy}
    if args.strategy == "while_in_flight":
        if args.duration is not None or args.burst is not None:
            raise UsageError("--duration and --burst apply to --strategy time_based only")
        if args.reserve:
            command = f"budget {args.budget_command}"
            strategy["reserve"] = group_pairs("--reserve", args.reserve, 0, MAX_TOKENS, command)
        return strategy
    if args.reserve:
        raise UsageError("--reserve applies to --strategy while_in_flight only")
    if args.duration is None:
        raise UsageError("--strategy time_based needs --duration (e.g. 1h)")
    strategy["duration_ms"] = args.duration
    if args.burst is not None:
        strategy["burst"] = args.burst
    return strategy


def patch_of(args: argparse.Namespace) -> dict[str, Any]:
    """The merge patch ``patch`` sends: only the options given; exit 2 if none."""
    patch: dict[str, Any] = {}
    if args.allocation is not None:
        patch["allocation"] = args.allocation
    strategy: dict[str, Any] = {}
    if args.strategy is not None:
        strategy["type"] = args.strategy
    if args.duration is not None:
        strategy["duration_ms"] = args.duration
    if args.burst is not None:
        strategy["burst"] = None if args.burst == RESET else args.burst
    if strategy:
        patch["strategy"] = strategy
    patch.update(enforce_of(args))
    if not patch:
        raise UsageError(
            "budget patch: give --allocation, --strategy, --duration, --burst, --shadow "
            "or --enforce"
        )
    return patch


def run_list(ctx: Context, _args: argparse.Namespace) -> int:
    """Every budget of the namespace."""

    def human(result: dict[str, Any]) -> str:
        budgets = result.get("budgets") or []
        return render(budgets, _now_ms()) if budgets else "no budgets"

    return ctx.show("budget_list", human)


def run_get(ctx: Context, args: argparse.Namespace) -> int:
    """One budget."""
    return _one(ctx, "budget_get", None, key=args.key)


def run_create(ctx: Context, args: argparse.Namespace) -> int:
    """Create a budget."""
    strategy = strategy_of(args)
    return _one(
        ctx, "budget_create", "created", key=args.key, allocation=args.allocation,
        strategy=strategy, **enforce_of(args),
    )  # fmt: skip


def run_set(ctx: Context, args: argparse.Namespace) -> int:
    """Create a budget or replace its settings (its tokens are kept)."""
    strategy = strategy_of(args)
    if args.dry_run:
        change = {"key": args.key, "allocation": args.allocation, "strategy": strategy,
                  **enforce_of(args)}  # fmt: skip
        return dry_run.preview(ctx, "budget_put", {}, **change)
    return _one(
        ctx, "budget_put", "saved", key=args.key, allocation=args.allocation, strategy=strategy,
        **enforce_of(args),
    )  # fmt: skip


def run_patch(ctx: Context, args: argparse.Namespace) -> int:
    """Change only the settings given."""
    if args.dry_run:
        return dry_run.preview(ctx, "budget_patch", {}, key=args.key, **patch_of(args))
    return _one(ctx, "budget_patch", "patched", key=args.key, **patch_of(args))


def run_delete(ctx: Context, args: argparse.Namespace) -> int:
    """Delete a budget."""
    return ctx.show("budget_delete", lambda _result: f"deleted budget {args.key}", key=args.key)


def run_pause(ctx: Context, args: argparse.Namespace) -> int:
    """Pause a budget until an instant, or for some seconds."""
    when = {"retry_after_s": args.retry_after} if args.until is None else {"until_ms": args.until}
    if args.reason is not None:
        when["reason"] = args.reason
    return _one(ctx, "budget_pause", "paused", key=args.key, **when)


def run_resume(ctx: Context, args: argparse.Namespace) -> int:
    """End a budget's pause now."""
    return _one(ctx, "budget_resume", "resumed", key=args.key)


def _one(ctx: Context, op: str, done: str | None, **args: Any) -> int:
    """Call a verb answering ``{budget}``; print the result or the budget's table."""
    with ctx.client() as client:
        result = client.call(op, **args)
    if ctx.json:
        emit_json(result)
        return 0
    if done is not None:
        print(f"{done} budget {args['key']}")
    print(render([result["budget"]], _now_ms()))
    return 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def cap(budget: dict[str, Any]) -> int:
    """The most tokens the budget's pool holds: ``burst``, else the allocation."""
    burst = budget["strategy"].get("burst")
    return budget["allocation"] if burst is None else burst


def describe_strategy(budget: dict[str, Any]) -> str:
    """``while_in_flight``, or ``time_based 10000/1h`` with `` burst N`` when set."""
    strategy = budget["strategy"]
    if strategy["type"] != "time_based":
        reserve = strategy.get("reserve") or {}
        named = ", ".join(f"{g or '(default)'}={n}" for g, n in reserve.items())
        return strategy["type"] + (f" reserve {named}" if named else "")
    text = f"time_based {budget['allocation']}/{format_duration_ms(strategy['duration_ms'])}"
    if strategy.get("burst") is not None:
        text += f" burst {strategy['burst']}"
    return text


def next_refill_ms(budget: dict[str, Any], now_ms: int) -> int | None:
    """When a ``time_based`` pool that is not full next holds one more whole token.

    ``available`` is read as of ``now_ms``; the drip adds ``allocation`` tokens
    per ``duration_ms``. None when the pool is full or not ``time_based``.
    """
    strategy = budget["strategy"]
    available = budget["state"]["available"]
    if strategy["type"] != "time_based" or available >= cap(budget):
        return None
    missing = math.floor(available) + 1 - available  # up to the next whole token
    return now_ms + math.ceil(missing * strategy["duration_ms"] / budget["allocation"])


def refill_cell(budget: dict[str, Any], now_ms: int) -> str:
    """The NEXT REFILL cell: a local time, ``full``, or ``-`` for ``while_in_flight``."""
    if budget["strategy"]["type"] != "time_based":
        return "-"
    state = budget["state"]
    at = state["next_refill_at"] if "next_refill_at" in state else next_refill_ms(budget, now_ms)
    return "full" if at is None else local_time(at)


def available_cell(budget: dict[str, Any]) -> str:
    """Tokens available: two decimals for ``time_based``, a whole number otherwise."""
    available = budget["state"]["available"]
    if budget["strategy"]["type"] == "time_based":
        return f"{available:.2f}"
    return str(int(available))


def pause_cell(budget: dict[str, Any]) -> str:
    """The PAUSED cell: the local time the pause ends and its reason, or ``-``."""
    state = budget["state"]
    until = state.get("paused_until")
    if until is None:
        return "-"
    reason = state.get("pause_reason")
    return local_time(until) + (f" ({reason})" if reason else "")


def render(budgets: list[dict[str, Any]], now_ms: int) -> str:
    """Budget objects as a table, NEXT REFILL computed as of ``now_ms``."""
    rows = [
        [
            b["key"] + (f" ({SHADOW_NOTE})" if b.get("enforce") is False else ""),
            b["allocation"],
            describe_strategy(b),
            available_cell(b),
            b["state"]["in_flight"],
            b["state"]["parked"],
            refill_cell(b, now_ms),
            pause_cell(b),
        ]
        for b in budgets
    ]
    return table(HEADERS, rows)
