"""``sluice enqueue`` and ``sluice jobs list|show|explain``: producing and reading jobs.

``jobs get`` is another name for ``jobs show``, as everywhere one thing is read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import orjson

from actors.limits import GROUP_RULE, MAX_TOKENS, NAME_RE, PRIORITY, valid_group
from daemon.cli import explain
from daemon.cli.context import Context, UsageError
from daemon.cli.output import compact, emit_json, local_instant, local_time, shorten, table
from daemon.sdk.protocol import drop_none
from daemon.transport.wide_ints import find_wide_int

STATES = ("scheduled", "pending", "running", "completed", "dead")


def int_range(lo: int, hi: int | None = None) -> Any:
    """An argparse type: an integer within ``lo..hi`` (exit 2 otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def budget_binding(text: str) -> dict[str, Any]:
    """``--budget KEY[:COST]`` as a binding ``{key, cost?}`` (argparse names the option).

    The cost is what follows the last ``:``, a whole number of at least 1. A key
    may itself contain ``:``; such a key is bound with its cost spelled out
    (``tenant:images:1``), so that ``k:x`` is a mistake rather than a key.
    """
    key, sep, cost = text.rpartition(":")
    if not sep:
        key, cost = text, ""
    elif not cost.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: COST after the last ':' must be a whole number, got {cost!r}"
            " (a key containing ':' is written with its cost: KEY:COST)"
        )
    elif not 1 <= int(cost) <= MAX_TOKENS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: COST must be from 1 to {MAX_TOKENS}, got {cost}"
        )
    if not key:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget KEY is missing (KEY[:COST])")
    if not NAME_RE.match(key):
        raise argparse.ArgumentTypeError(f"bad budget key {key!r}: 1-128 of [A-Za-z0-9._:-]")
    return {"key": key, "cost": int(cost)} if cost else {"key": key}


def parse_payload(text: str | None) -> Any:
    """``--payload``: JSON text, or ``-`` to read it from stdin; exit 2 if it is not JSON."""
    if text is None:
        return None
    raw = sys.stdin.buffer.read() if text == "-" else text.encode()
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--payload is not valid JSON: {exc}") from None
    wide = find_wide_int(raw)  # orjson would send it as a rounded float
    if wide is not None:
        raise UsageError(f"--payload: {wide.refused('payload').message}")
    return payload


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``enqueue`` and ``jobs list|show``."""
    p = sub.add_parser("enqueue", parents=[common], help="enqueue one job")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("--payload", metavar="JSON", help="the payload as JSON, or - for stdin")
    p.add_argument("--priority", type=int_range(*PRIORITY), help="0-65535, lower runs first")
    p.add_argument("--delay-ms", type=int_range(0), metavar="N", help="run no sooner than N ms")
    p.add_argument("--max-attempts", type=int_range(1), metavar="N")
    p.add_argument("--lease-ms", type=int_range(1), metavar="N")
    p.add_argument("--unique-key", metavar="K", help="at most one live job per key")
    p.add_argument(
        "--debounce-ms",
        type=int_range(0),
        metavar="N",
        help="with --unique-key: fold into a waiting duplicate",
    )
    p.add_argument(
        "--budget",
        type=budget_binding,
        action="append",
        metavar="KEY[:COST]",
        help="bind the job to a budget, COST tokens (default 1) a run; repeatable: "
        "every bound budget must pay before the job runs",
    )
    p.add_argument("--group", type=group_option, metavar="GROUP",
                   help="the job's fairness group, e.g. a customer id")  # fmt: skip
    p.set_defaults(run=run_enqueue)

    jobs = sub.add_parser("jobs", parents=[common], help="list jobs or show one")
    verbs = jobs.add_subparsers(dest="jobs_command", required=True,
                                metavar="list|show|get|explain")  # fmt: skip
    ls = verbs.add_parser("list", parents=[common], help="jobs in id order")
    ls.add_argument("--queue", metavar="Q")
    ls.add_argument("--status", choices=STATES)
    ls.add_argument("--limit", type=int_range(1, 1000), default=100, metavar="N")
    ls.add_argument("--after", metavar="CURSOR", help="the next page (from a previous list)")
    ls.set_defaults(run=run_list)
    show = verbs.add_parser("show", aliases=["get"], parents=[common], help="one job in full")
    show.add_argument("job_id", metavar="ID")
    show.set_defaults(run=run_show)
    explain.register(verbs, common)


def group_option(text: str) -> str:
    """``--group``: exit 2 unless it is :data:`~actors.limits.GROUP_RULE`."""
    if not valid_group(text):
        raise argparse.ArgumentTypeError(f"a group is {GROUP_RULE}")
    return text


def run_enqueue(ctx: Context, args: argparse.Namespace) -> int:
    """Enqueue one job and say what became of it."""
    payload = parse_payload(args.payload)
    options = drop_none(
        priority=args.priority,
        delay_ms=args.delay_ms,
        max_attempts=args.max_attempts,
        lease_ms=args.lease_ms,
        unique_key=args.unique_key,
        debounce_ms=args.debounce_ms,
        budgets=args.budget,
        group=args.group,
    )
    if args.debounce_ms is not None and args.unique_key is None:
        raise UsageError("--debounce-ms needs --unique-key")
    with ctx.client() as client:
        result = client.call(
            "enqueue", **drop_none(queue=args.queue, type=args.type, payload=payload, **options)
        )
    if ctx.json:
        emit_json(result)
        return 0
    job = result["job"]
    if result.get("duplicate"):
        print(f"duplicate: job {job['id']} already holds that unique key ({job['status']})")
    elif result.get("folded"):
        print(f"folded into job {job['id']} (ready {local_time(job['ready_at'])})")
    else:
        when = "" if job["status"] != "scheduled" else f", ready {local_time(job['ready_at'])}"
        bound = f", budgets {bindings_text(job['budgets'])}" if job.get("budgets") else ""
        print(f"enqueued job {job['id']} on {job['queue']} ({job['status']}{when}{bound})")
    return 0


def run_list(ctx: Context, args: argparse.Namespace) -> int:
    """One page of jobs."""
    with ctx.client() as client:
        result = client.list(args.queue, args.status, args.limit, args.after)
    if ctx.json:
        emit_json(result)
        return 0
    print(render_list(result))
    return 0


def render_list(result: dict[str, Any]) -> str:
    """A page of jobs as a table."""
    jobs = result.get("jobs") or []
    if not jobs:
        return "no jobs"
    rows = [
        [
            j["id"],
            j["queue"],
            j["type"],
            j["status"],
            f"{j['attempts']}/{j['max_attempts']}",
            j["priority"],
            local_time(j.get("ready_at")),
            admission_text(j.get("admission"), local_time),
            shorten(j.get("error")),
        ]
        for j in jobs
    ]
    headers = ["ID", "QUEUE", "TYPE", "STATUS", "ATTEMPTS", "PRIORITY", "READY", "ADMISSION"]
    text = table([*headers, "ERROR"], rows)
    if result.get("next"):
        text += f"\n(more: --after {result['next']})"
    return text


def run_show(ctx: Context, args: argparse.Namespace) -> int:
    """One job in full."""
    return ctx.show("get", lambda result: render_job(result["job"]), job_id=args.job_id)


def render_job(job: dict[str, Any]) -> str:
    """A job object, one field a line, instants in the local zone."""
    lines = []
    for key, value in job.items():
        if key.endswith("_at"):
            shown = local_instant(value)
        elif key == "admission" and value:
            shown = admission_text(value, local_instant) or str(value.get("state", "-"))
        elif key == "budgets" and value:
            shown = bindings_text(value)
        elif key == "costs":
            shown = costs_text(value) if value else "-"
        elif key in ("payload", "result", "dead", "budgets") and value is not None:
            shown = compact(value)
        else:
            shown = "-" if value is None else str(value)
        lines.append((key, shown))
    width = max(len(k) for k, _ in lines)
    indent = "\n" + " " * (width + 2)  # a multi-line error stays in its column
    return "\n".join(f"{k.ljust(width)}  {v.replace(chr(10), indent)}" for k, v in lines)


def costs_text(costs: list[dict[str, Any]]) -> str:
    """A job's ``costs``: ``openai 10 settled 4, slots 1`` (unsettled: the reserve)."""
    return ", ".join(
        f"{c['key']} {c['reserved']}"
        + ("" if c.get("settled") is None else f" settled {c['settled']:g}")
        for c in costs
    )


def bindings_text(budgets: list[dict[str, Any]]) -> str:
    """A job's budget bindings as ``--budget`` spells them: ``images, slots:2``."""
    return ", ".join(
        b["key"] if b.get("cost", 1) == 1 else f"{b['key']}:{b['cost']}" for b in budgets
    )


def admission_text(admission: dict[str, Any] | None, when: Callable[[int | None], str]) -> str:
    """Why a pending job may not run yet, and when it may: ``""`` if nothing holds it back.

    ``deferred: budget_exhausted on images, eligible 2026-08-31 19:22:05``; an
    estimate (``exact`` false: a slot frees when a running job ends or its lease
    lapses) reads ``eligible ~<time>``, and no known instant ``eligible: not known``.
    ``when`` formats the instant (``local_time`` or ``local_instant``).
    """
    if not admission or admission.get("state") != "deferred":
        return ""
    text = f"deferred: {admission.get('reason') or 'unknown'}"
    if admission.get("budget"):
        text += f" on {admission['budget']}"
    if admission.get("pause_reason"):
        text += f" ({admission['pause_reason']})"
    at = admission.get("next_eligible_at")
    if at is None:
        return text + ", eligible: not known"
    return text + f", eligible {'' if admission.get('exact') else '~'}{when(at)}"
