"""``sluice queue budget show|set|clear``: a queue's admission policy (seed 002).

``show`` (or ``get``, its other name) is ``admission_status {queue}`` (any
grant that reaches the queue may read it): one line of usage such as ``73 of
100 used · 1 of 2 in flight · resets 00:00 PST (08:00 UTC)``, times in the
policy's zone and, in brackets, in the viewer's own (``TZ``), with the date
too when the instant is more than a day away. A limit the policy does not set
reads ``no window limit`` or ``N in flight (no limit)``; a deferred queue says
why and until when (``window exhausted until ...``). ``set`` is
``policy_set``: it replaces the whole policy (a limit not given is unset);
``clear`` is ``policy_clear``.
``--json`` prints that verb's result exactly.

The CLI refuses itself (exit 2, naming the option) what it can see is wrong:
no limit given, a count out of range, a zone the embedded database does not
know, a malformed ``--start``, ``--weekday`` without ``--period week`` (or
missing with it), window options without ``--max-claims-per-window``, a
malformed ``--window`` (``N/PERIOD[@ZONE]``, :mod:`daemon.cli.windows`) or one
given with the single-window options. The
daemon's refusals (``forbidden`` without the grant, ``not_found`` for a queue
the token may not manage, ``conflict`` for a policy the config file
provisions, ``rate_limited``) exit 1 with its code and message.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, tzinfo
from typing import Any

from actors.limits import NAME_RE
from daemon.cli import dry_run
from daemon.cli.context import Context, UsageError
from daemon.cli.jobs import int_range
from daemon.cli.output import emit_json
from daemon.cli.queue_groups import add_group_options, describe_groups, group_fields
from daemon.cli.quota import namespace_name
from daemon.cli.shadow import SHADOW_NOTE, add_enforce_options, enforce_of
from daemon.cli.windows import (
    MAX_CLAIMS,
    WEEKDAYS,
    describe_windows,
    start_time,
    usage_parts,
    window_spec,
    zone_name,
)

#: ``actors.policy``'s bound (seed 002 REQ-1).
MAX_IN_FLIGHT = 10_000
PERIODS = ("second", "minute", "hour", "day", "week", "month")
DAY_MS = 86_400_000
DOT = " · "
WINDOW_OPTIONS = ("--period", "--tz", "--start", "--weekday")


def queue_name(text: str) -> str:
    """An argparse type: a queue (1-128 of ``[A-Za-z0-9._:-]``)."""
    if not NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"bad queue {text!r}: 1-128 of [A-Za-z0-9._:-]")
    return text


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``queue budget show|set|clear`` (``get`` is ``show``)."""
    queue = sub.add_parser("queue", parents=[common], help="a queue's admission policy")
    groups = queue.add_subparsers(dest="queue_command", required=True, metavar="budget")
    budget = groups.add_parser(
        "budget", parents=[common], help="show, set or clear a queue's admission policy"
    )
    verbs = budget.add_subparsers(
        dest="budget_command", required=True, metavar="show|get|set|clear"
    )
    show = verbs.add_parser(
        "show",
        aliases=["get"],
        parents=[common],
        help="the policy, its usage and whether claims are admitted",
    )
    show.add_argument("queue", type=queue_name, metavar="QUEUE")
    _namespace_option(show)
    show.set_defaults(run=run_show)
    set_ = verbs.add_parser(
        "set",
        parents=[common],
        help="replace the queue's policy (a limit not given is unset)",
        description="Replace the queue's admission policy: a limit not given is unset; "
        "0 pauses the queue. --max-claims-per-window needs a window: --period and --tz "
        "(--start defaults to 00:00; --weekday is for --period week only, and required "
        "there). Needs the manage grant or set_admission_policy.",
    )
    set_.add_argument("queue", type=queue_name, metavar="QUEUE")
    set_.add_argument("--max-in-flight", type=int_range(0, MAX_IN_FLIGHT), metavar="N",
                      help=f"claimed jobs at once, 0-{MAX_IN_FLIGHT} (0 pauses)")  # fmt: skip
    set_.add_argument("--max-claims-per-window", type=int_range(0, MAX_CLAIMS), metavar="N",
                      help=f"claims per window, 0-{MAX_CLAIMS} (0 pauses)")  # fmt: skip
    set_.add_argument("--period", choices=PERIODS,
                      help="the window: second, minute, hour, day, week or month")  # fmt: skip
    set_.add_argument("--tz", type=zone_name, metavar="ZONE",
                      help="the window's IANA zone, e.g. America/Los_Angeles")  # fmt: skip
    set_.add_argument("--start", type=start_time, metavar="HH:MM",
                      help="when each window starts (default 00:00; hourly: 00:MM)")  # fmt: skip
    set_.add_argument("--weekday", choices=WEEKDAYS, help="the day a weekly window starts")
    set_.add_argument("--window", type=window_spec, action="append", metavar="N/PERIOD[@ZONE]",
                      help="a stacked window, repeatable, one per period: 10/s, "
                      "100000/day@America/New_York, 500/hour@UTC,start=00:30, "
                      "1000/week@Europe/Berlin,weekday=Fri; periods s m h d w mo "
                      "(instead of --max-claims-per-window and its window)")  # fmt: skip
    add_group_options(set_)
    add_enforce_options(set_)
    _namespace_option(set_)
    dry_run.add_option(set_)
    set_.set_defaults(run=run_set)
    clear = verbs.add_parser("clear", parents=[common], help="remove the policy: no limits")
    clear.add_argument("queue", type=queue_name, metavar="QUEUE")
    _namespace_option(clear)
    clear.set_defaults(run=run_clear)


def _namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", type=namespace_name, metavar="NS",
        help="another namespace (operator grant; default: the token's)",
    )  # fmt: skip


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.namespace is None else {"namespace": args.namespace}


def policy_of(args: argparse.Namespace) -> dict[str, Any]:
    """The fields ``set`` sends; :class:`UsageError` (exit 2) naming the option."""
    windows = getattr(args, "window", None)
    groups = group_fields(args)
    if (args.max_in_flight is None and args.max_claims_per_window is None and not windows
            and not groups):  # fmt: skip
        raise UsageError(
            "queue budget set: give --max-in-flight, --max-claims-per-window, --window "
            "or a group option (set replaces the whole policy; to remove it: sluice queue "
            "budget clear)"
        )
    fields: dict[str, Any] = {**groups, **enforce_of(args)}
    if args.max_in_flight is not None:
        fields["max_in_flight"] = args.max_in_flight
    given = [o for o in WINDOW_OPTIONS if getattr(args, o[2:]) is not None]
    if windows:
        single = given + (["--max-claims-per-window"] if args.max_claims_per_window is not None
                          else [])  # fmt: skip
        if single:
            raise UsageError(f"queue budget set: {single[0]} is for the single window; "
                             "with --window, each window carries its own")  # fmt: skip
        fields["windows"] = windows
        return fields
    if args.max_claims_per_window is None:
        if given:
            raise UsageError(f"queue budget set: {given[0]} applies to --max-claims-per-window "
                             "only (the window it counts in)")  # fmt: skip
        return fields
    fields["max_claims_per_window"] = args.max_claims_per_window
    for option in ("--period", "--tz"):
        if getattr(args, option[2:]) is None:
            raise UsageError(f"queue budget set: {option} is required with "
                             "--max-claims-per-window")  # fmt: skip
    start = args.start or "00:00"
    if args.period == "hour" and not start.startswith("00:"):
        raise UsageError(f"queue budget set: --start for an hourly window is 00:MM, the minute "
                         f"each window starts, got {start!r}")  # fmt: skip
    window = {"period": args.period, "tz": args.tz, "start": start}
    if args.period == "week":
        if args.weekday is None:
            raise UsageError("queue budget set: --weekday is required with --period week")
        window["weekday"] = args.weekday
    elif args.weekday is not None:
        raise UsageError(f"queue budget set: --weekday is for --period week only, "
                         f"not {args.period}")  # fmt: skip
    fields["window"] = window
    return fields


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    """The queue's policy, usage and admission status."""
    with ctx.client() as client:
        result = client.call("admission_status", queue=args.queue, **_scope(args))
    if ctx.json:
        emit_json(result)
        return 0
    entry = next((q for q in result.get("queues", []) if q.get("queue") == args.queue), None)
    if entry is None:
        print(f"no policy on queue {args.queue!r}: claims are not limited")
        return 0
    print(render(entry, _now_ms()))
    return 0


def run_set(ctx: Context, args: argparse.Namespace) -> int:
    """Replace the queue's policy."""
    fields = policy_of(args)
    if args.dry_run:
        return dry_run.preview(ctx, "policy_set", _scope(args), queue=args.queue, **fields)
    return ctx.show(
        "policy_set",
        lambda result: f"saved the policy of queue {args.queue!r}: {describe(result['policy'])}",
        queue=args.queue, **fields, **_scope(args),
    )  # fmt: skip


def run_clear(ctx: Context, args: argparse.Namespace) -> int:
    """Remove the queue's policy."""
    message = f"cleared the policy of queue {args.queue!r}: claims are not limited"
    return ctx.show("policy_clear", lambda _result: message, queue=args.queue, **_scope(args))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- rendering ------------------------------------------------------------------------


def describe(policy: dict[str, Any] | None) -> str:
    """A policy in one line: ``max_in_flight 2 · 100 claims per day from 00:00 America/...``."""
    if policy is None:
        return "cannot be evaluated"
    parts = []
    if policy.get("max_in_flight") is not None:
        parts.append(f"max_in_flight {policy['max_in_flight']}")
    if policy.get("max_claims_per_window") is not None:
        parts.append(f"max_claims_per_window {policy['max_claims_per_window']} "
                     f"{describe_window(policy.get('window'))}")  # fmt: skip
    if policy.get("windows"):
        parts.append(f"windows {describe_windows(policy['windows'])}")
    parts += describe_groups(policy)
    if policy.get("enforce") is False:
        parts.append(SHADOW_NOTE)
    return DOT.join(parts) or "no limits"


def describe_window(window: dict[str, Any] | None) -> str:
    """``per day from 00:00 America/Los_Angeles``, ``per hour from :30 UTC``, ..."""
    if not window:
        return "(no window)"
    period, tz, start = window.get("period"), window.get("tz"), window.get("start", "")
    if period == "hour":
        return f"per hour from :{start[3:]} {tz}"
    if period == "week":
        return f"per week from {window.get('weekday')} {start} {tz}"
    return f"per {period} from {start} {tz}"


def _zone(name: str | None) -> tzinfo | None:
    if not name:
        return None
    try:
        from actors.window import zone

        return zone(name)
    except KeyError:
        return None


def when(ms: int, tz: str | None, now_ms: int) -> str:
    """An instant in the policy's zone and, in brackets, the viewer's (when they differ)."""
    pattern = "%a %d %b %H:%M %Z" if ms - now_ms > DAY_MS else "%H:%M %Z"
    here = datetime.fromtimestamp(ms / 1000).astimezone().strftime(pattern)
    zone = _zone(tz)
    if zone is None:
        return here
    there = datetime.fromtimestamp(ms / 1000, zone).strftime(pattern)
    return there if there == here else f"{there} ({here})"


def usage_line(entry: dict[str, Any], now_ms: int) -> str:
    """``73 of 100 used · 1 of 2 in flight · resets 00:00 PST (08:00 UTC)``."""
    policy = entry.get("policy") or {}
    tz = (policy.get("window") or {}).get("tz")
    parts = []
    claims = policy.get("max_claims_per_window")
    if entry.get("windows"):
        parts += usage_parts(entry["windows"], lambda at, zone: when(at, zone, now_ms))
    elif claims is not None:
        parts.append(f"{entry.get('used') or 0} of {claims} used")
    elif entry.get("policy") is not None:
        parts.append("no window limit")
    in_flight = entry.get("in_flight") or 0
    cap = policy.get("max_in_flight")
    if cap is not None:
        parts.append(f"{in_flight} of {cap} in flight")
    else:
        parts.append(f"{in_flight} in flight" + (" (no limit)" if policy else ""))
    if entry.get("window_resets_at") is not None and not entry.get("windows"):
        parts.append(f"resets {when(entry['window_resets_at'], tz, now_ms)}")
    return DOT.join(parts)


def status_line(entry: dict[str, Any], now_ms: int) -> str:
    """``admitted``, or why claims wait and until when."""
    status = entry.get("status") or {}
    if status.get("state") != "deferred":
        return "admitted"
    reason, at = status.get("reason"), status.get("next_eligible_at")
    holding = status.get("window")  # stacked windows: the one that holds claims back
    tz = (holding or (entry.get("policy") or {}).get("window") or {}).get("tz")
    if reason == "window_exhausted":
        text = f"{holding['period']} " if holding else ""
        text += "window exhausted" + (f" until {when(at, tz, now_ms)}" if at is not None else "")
    elif reason == "in_flight_full":
        text = "in flight full: claims resume when a slot frees"
        if at is not None:  # a hint (exact: false), not a promise (seed 002 REQ-6)
            text += f" (a lease lapses around {when(at, tz, now_ms)})"
    elif reason == "paused":
        text = "paused: a limit is 0"
    elif reason == "admission_unavailable":
        text = "admission unavailable: the policy cannot be evaluated, claims are refused"
    else:
        text = str(reason)
    pending = entry.get("pending") or 0
    return f"deferred, {text}{DOT}{pending} pending held back"


def render(entry: dict[str, Any], now_ms: int) -> str:
    """One ``admission_status`` entry for humans: ``field  value`` lines."""
    policy = entry.get("policy")
    rows = [("queue", str(entry.get("queue"))), ("policy", describe(policy)),
            ("usage", usage_line(entry, now_ms)), ("status", status_line(entry, now_ms)),
            ("pending", str(entry.get("pending", 0)))]  # fmt: skip
    if policy is not None:
        rows.append(("source", f"{policy.get('source')}, updated by {policy.get('updated_by')}"))
    width = max(len(k) for k, _v in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
