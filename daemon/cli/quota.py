"""``sluice quota set|get|clear``: a namespace's quota document (seed 000).

Each subcommand is one verb: ``set`` is ``quota_set`` (it replaces the whole
document: a field not given is unset, that is unlimited; the door limits of
seed 001 have options too), ``get`` (or ``show``) is ``quota_get``,
``clear`` is ``quota_clear``. ``--json`` prints that verb's result.
``--namespace NS`` names another namespace (the ``operator`` grant); without it
the namespace is the token's.

The CLI refuses itself (exit 2, naming the option) what it can see is wrong: a
negative or non-integer count, a malformed ``--enqueue-rate``, a bad namespace
name. The daemon's refusals (``forbidden`` without ``operator``, ``conflict``
for a document the config file provisions, ...) exit 1 with its code and
message, as every command does.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from actors.limits import NAME_RE
from daemon.cli import dry_run
from daemon.cli.context import Context, UsageError
from daemon.cli.output import compact, emit_json
from daemon.cli.shadow import SHADOW_NOTE, add_enforce_options, enforce_of

#: The largest count a limit takes (``actors.quota.MAX_LIMIT``: int64).
MAX_LIMIT = 2**63 - 1
RATE_RE = re.compile(r"^([0-9]+)/(s|m|h)$")
#: The document's fields ``quota set`` sets, with their options, in display order.
FIELDS = (
    ("max_pending", "--max-pending", "scheduled and pending jobs (checked at enqueue)"),
    ("on_excess", "--on-excess", "over max_pending or enqueue_rate: reject (default) or drop"),
    ("enqueue_rate", "--enqueue-rate", "jobs enqueued per unit, <count>/<s|m|h>, e.g. 500/s"),
    ("max_running", "--max-running", "jobs running at once (checked at dispatch)"),
    ("max_archived_rows", "--max-archived-rows", "completed jobs kept (retention sweep)"),
    ("max_dead_rows", "--max-dead-rows", "dead letters kept (retention sweep)"),
)
#: Seed 001's door limits, set with ``quota set`` too (listed after the six above).
DOOR_FIELDS = (
    ("request_rate", "--request-rate", "requests: bucket CAPACITY,REFILL_PER_S, e.g. 100,20"),
    ("message_rate", "--message-rate", "jobs in and out: bucket CAPACITY,REFILL_PER_S"),
    ("max_item_bytes", "--max-item-bytes", "bytes of one job's payload as compact JSON"),
    ("max_queues", "--max-queues", "queues of the namespace"),
    ("max_retention_ms", "--max-retention-ms", "longest completed/dead TTL a queue may ask"),
    ("max_waiting_claims", "--max-waiting-claims", "claim_next calls waiting at once"),
    ("max_retained_bytes", "--max-retained-bytes", "stored bytes of the namespace's jobs"),
    ("retained_release_band", "--retained-release-band",
     "fraction under max_retained_bytes that releases its block (default 0.1)"),
    ("monthly_jobs_quota", "--monthly-jobs-quota", "jobs enqueued per UTC calendar month"),
)  # fmt: skip
NO_QUOTA = "no quota: every limit is unlimited"


def namespace_name(text: str) -> str:
    """An argparse type: a namespace (1-128 of ``[A-Za-z0-9._:-]``)."""
    if not NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"bad namespace {text!r}: 1-128 of [A-Za-z0-9._:-]")
    return text


def count(text: str) -> int:
    """An argparse type: a limit, an integer from 0 (zero is a real limit)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {value}")
    if value > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LIMIT}, got {value}")
    return value


def rate(text: str) -> str:
    """An argparse type: ``<count>/<unit>``, unit ``s``, ``m`` or ``h``, count at least 1."""
    match = RATE_RE.match(text)
    if match is None or int(match[1]) < 1:
        raise argparse.ArgumentTypeError(
            f"must be <count>/<unit> with a count of at least 1 and unit s, m or h "
            f"(e.g. 500/s), got {text!r}"
        )
    return f"{int(match[1])}/{match[2]}"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``quota set|get|clear`` (``show`` is ``get``)."""
    quota = sub.add_parser("quota", parents=[common], help="show and change a namespace's quota")
    verbs = quota.add_subparsers(dest="quota_command", required=True, metavar="set|get|show|clear")
    set_ = verbs.add_parser(
        "set",
        parents=[common],
        help="replace the quota document (limits not given become unlimited)",
        description="Replace the namespace's quota document: a limit not given is unset "
        "(unlimited); zero is a real limit. Needs the operator grant.",
    )
    _namespace_option(set_)
    for field, option, help_text in FIELDS + DOOR_FIELDS:
        if field == "on_excess":
            set_.add_argument(option, dest=field, choices=("reject", "drop"), help=help_text)
        elif field == "enqueue_rate":
            set_.add_argument(option, dest=field, type=rate, metavar="N/UNIT", help=help_text)
        elif field in ("request_rate", "message_rate"):
            set_.add_argument(option, dest=field, type=bucket, metavar="C,R", help=help_text)
        elif field == "retained_release_band":
            set_.add_argument(option, dest=field, type=fraction, metavar="F", help=help_text)
        else:
            set_.add_argument(option, dest=field, type=count, metavar="N", help=help_text)
    add_enforce_options(set_)
    dry_run.add_option(set_)
    set_.set_defaults(run=run_set)
    get = verbs.add_parser(
        "get", aliases=["show"], parents=[common], help="the quota document and its source"
    )
    _namespace_option(get)
    get.set_defaults(run=run_get)
    clear = verbs.add_parser("clear", parents=[common], help="remove the quota document: no limits")
    _namespace_option(clear)
    clear.set_defaults(run=run_clear)


def bucket(text: str) -> dict[str, Any]:
    """An argparse type: a door bucket ``CAPACITY,REFILL_PER_S`` (e.g. ``100,20``)."""
    capacity, comma, refill = text.partition(",")
    try:
        value = {"capacity": count(capacity), "refill_per_s": float(refill)}
    except (ValueError, argparse.ArgumentTypeError):
        value = None
    if not comma or value is None or not 0 <= value["refill_per_s"] < math.inf:
        raise argparse.ArgumentTypeError(
            f"must be CAPACITY,REFILL_PER_S (an integer and a number >= 0, e.g. 100,20), "
            f"got {text!r}"
        )
    return value


def fraction(text: str) -> float:
    """An argparse type: a fraction from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1, got {text!r}")
    return value


def _namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        type=namespace_name,
        metavar="NS",
        help="another namespace (operator grant; default: the token's)",
    )


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.namespace is None else {"namespace": args.namespace}


def document_of(args: argparse.Namespace) -> dict[str, Any]:
    """The document ``set`` sends: the options given; exit 2 if none."""
    doc = {field: getattr(args, field) for field, _o, _h in FIELDS + DOOR_FIELDS}
    doc = {k: v for k, v in doc.items() if v is not None}
    if not doc:  # --shadow alone would shadow nothing
        options = ", ".join(option for _f, option, _h in FIELDS)
        raise UsageError(
            f"quota set: give at least one of {options} "
            "(set replaces the whole document; to remove it: sluice quota clear)"
        )
    return {**doc, **enforce_of(args)}


def run_set(ctx: Context, args: argparse.Namespace) -> int:
    """Replace the namespace's quota document."""
    doc = document_of(args)
    if args.dry_run:
        return dry_run.preview(ctx, "quota_set", _scope(args), quota=doc)
    with ctx.client() as client:
        result = client.call("quota_set", quota=doc, **_scope(args))
    if ctx.json:
        emit_json(result)
        return 0
    print(f"saved the quota of {_whose(args)}")
    print(render({"quota": result["quota"], "source": "api"}, args.namespace))
    return 0


def run_get(ctx: Context, args: argparse.Namespace) -> int:
    """The namespace's quota document, its source, and why it fails if it does."""
    return ctx.show("quota_get", lambda result: render(result, args.namespace), **_scope(args))


def run_clear(ctx: Context, args: argparse.Namespace) -> int:
    """Remove the namespace's quota document."""
    message = f"cleared the quota of {_whose(args)}: every limit is unlimited"
    return ctx.show("quota_clear", lambda _result: message, **_scope(args))


def _whose(args: argparse.Namespace) -> str:
    return "this token's namespace" if args.namespace is None else f"namespace {args.namespace!r}"


def render(result: dict[str, Any], namespace: str | None = None) -> str:
    """``quota_get``'s result for humans: one ``field  value`` line each.

    The six fields of seed 000 are always listed (``unlimited`` when unset);
    any other field the document sets (door limits) follows.
    """
    rows: list[tuple[str, str]] = []
    if namespace is not None:
        rows.append(("namespace", namespace))
    quota, source, error = result.get("quota"), result.get("source"), result.get("error")
    if quota is None and error is None:
        return _pairs(rows) + ("\n" if rows else "") + NO_QUOTA
    rows.append(("source", source or "-"))
    if error is not None:
        rows.append(("error", error))
        note = (
            "the stored document does not decode: the namespace fails closed "
            "(enqueues refused, nothing starts) until the quota is set again or cleared"
        )
        return _pairs(rows) + "\n" + note
    shown = {field for field, _o, _h in FIELDS}
    for field, _o, _h in FIELDS:
        value = quota.get(field)
        if value is None and field == "on_excess":
            value = "reject"
        rows.append((field, "unlimited" if value is None else _cell(value)))
    rows += [(k, _cell(v)) for k, v in quota.items() if k not in shown and v is not None]
    return _pairs(rows)


def _cell(value: Any) -> str:
    if value is False:  # the one boolean of the document: enforce
        return f"false ({SHADOW_NOTE})"
    return value if isinstance(value, str) else compact(value)


def _pairs(rows: list[tuple[str, str]]) -> str:
    if not rows:
        return ""
    width = max(len(k) for k, _v in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
