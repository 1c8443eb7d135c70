"""What each board page shows, gathered from reading verbs for one session.

Every function here reads through :func:`daemon.board.reads.read`, so a page
holds only what the session's token may see: another namespace needs the
``operator`` grant, queues outside the token's scope never appear, and a
section whose verb the token is not granted is left out (``None``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.errors import not_found
from actors.history import MINUTE_MS
from daemon.board import charts, present
from daemon.board.reads import maybe, read
from daemon.session import Session

if TYPE_CHECKING:
    from daemon.services import Services

#: The pictures cover the last three hours.
CHART_MINUTES = 180
JOBS_SHOWN = 100


def namespaces(core: Services, session: Session) -> list[str]:
    """The namespaces the session may look at: its own, or for an ``operator``
    every one that exists in the store (queues, budgets, policies, a quota
    document) or the config file (a token's namespace, a quota table). Names
    only; each is then read through the verbs. A namespace merely named by a
    read (``GET /board/ns/<name>``) is none of these, so it is not listed."""
    if not session.has("operator"):
        return [session.namespace]
    known = {ns for ns, _q in core.known_queues} | {ns for ns, _k in core.budgets}
    known |= {ns for ns, _q in core.policies.states}
    known |= {
        a.namespace for a in core.namespaces.known() if a.quota is not None or a.broken is not None
    }
    known |= {t.namespace for t in core.config.tokens} | set(core.config.quota_tables)
    return sorted(known | {session.namespace})


def can_edit_policy(session: Session) -> bool:
    """True when the session may write queue policies (within its scope)."""
    return session.has("manage") or session.has("set_admission_policy")


def headers(
    core: Services, session: Session, ns: str, queue: str | None = None
) -> list[dict[str, Any]]:
    """The queue headers of ``ns`` (or of one queue): counts, and for a policy
    queue its usage, limits, status and reset instant (seed 002 REQ-11)."""
    status = read(core, session, "status", ns)
    admission = (
        read(core, session, "admission_status", ns, queue=queue)
        if queue
        else read(core, session, "admission_status", ns)
    )
    by_queue = {a["queue"]: a for a in admission["queues"]}
    out = []
    for row in status["queues"]:
        if queue is not None and row["queue"] != queue:
            continue
        out.append(header(row, by_queue.get(row["queue"]), session))
    for name, entry in sorted(by_queue.items()):  # a policy on a queue without jobs yet
        if name not in {h["queue"] for h in out}:
            counts = {
                "queue": name,
                "scheduled": 0,
                "pending": 0,
                "running": 0,
                "completed": 0,
                "dead": 0,
            }
            out.append(header(counts, entry, session))
    return sorted(out, key=lambda h: h["queue"])


def header(
    counts: dict[str, Any], admission: dict[str, Any] | None, session: Session
) -> dict[str, Any]:
    """One queue's header from its ``status`` row and ``admission_status`` entry."""
    h: dict[str, Any] = {
        **counts,
        "policy": None,
        "label": "admitted",
        "word": "admitted",
        "editable": can_edit_policy(session),
    }
    if admission is None:
        return h
    policy = admission["policy"] or {}
    # Stacked windows: each shows its own usage; the first's zone is the queue's.
    windows = admission.get("windows")
    window = policy.get("window") or (policy.get("windows") or [{}])[0]
    state = admission["status"]
    label = state.get("reason") or "admitted"
    h.update(
        policy=policy,
        used=admission["used"],
        max_claims=policy.get("max_claims_per_window"),
        in_flight=admission["in_flight"],
        max_in_flight=policy.get("max_in_flight"),
        resets_at=None if windows else admission["window_resets_at"],
        windows=windows,
        # Stacked windows: the stream wakes when the first of them resets.
        wakes_at=min((w["window_resets_at"] for w in windows), default=None) if windows else None,
        window_start_at=admission["window_start_at"],
        tz=window.get("tz"),
        period=window.get("period"),
        label=label,
        word=present.status_word(label),
        next_eligible_at=state.get("next_eligible_at"),
        source=policy.get("source"),
        error=policy.get("error"),
        groups=admission.get("groups") or [],
        groups_truncated=admission.get("groups_truncated", False),
    )
    return h


def overview(core: Services, session: Session) -> list[dict[str, Any]]:
    """A line per visible namespace: its queues' totals and held-back queues."""
    out = []
    for ns in namespaces(core, session):
        hs = headers(core, session, ns)
        out.append(
            {
                "namespace": ns,
                "queues": len(hs),
                "pending": sum(h["pending"] for h in hs),
                "running": sum(h["running"] for h in hs),
                "dead": sum(h["dead"] for h in hs),
                "held": [h for h in hs if h["label"] != "admitted"],
            }
        )
    return out


def jobs(
    core: Services, session: Session, ns: str, queue: str, state: str, limit: int = JOBS_SHOWN
) -> list[dict[str, Any]]:
    """A queue's jobs in ``state`` (pending ones with their chip)."""
    listed = read(core, session, "list", ns, queue=queue, status=state, limit=limit)["jobs"]
    for job in listed:
        job["chip"] = present.chip(job.get("admission"))
    return listed


def queue_page(core: Services, session: Session, ns: str, queue: str) -> dict[str, Any]:
    """Everything the queue page shows."""
    found = headers(core, session, ns, queue)
    if not found:
        raise not_found(f"queue {queue!r}")
    h = found[0]
    now = core.clock.now_ms()
    dead = maybe(core, session, "dead_list", ns, queue=queue, limit=50)
    return {
        "h": h,
        "pending": jobs(core, session, ns, queue, "pending"),
        "scheduled": jobs(core, session, ns, queue, "scheduled", 20),
        "running": jobs(core, session, ns, queue, "running"),
        "dead": None if dead is None else dead["jobs"],
        "audit": maybe_audit(core, session, ns, "queue", queue),
        "chart": claims_chart(core, ns, h, now),
        "groups": group_bars(h),
        "can_replay": session.has("manage") or session.has("produce"),
    }


def group_bars(h: dict[str, Any]) -> list[dict[str, Any]]:
    """A policy queue's groups (``admission_status``'s, at most 1,000), each with
    its bar: in flight, reserved and lent against the queue's ``max_in_flight``."""
    rows = h.get("groups") or []
    scale = h.get("max_in_flight")
    if scale is None:
        scale = max((g["in_flight"] + g["reserved"] for g in rows), default=1)
    return [{**g, "bar": charts.group_bar(f"grp-{i}", g, scale)} for i, g in enumerate(rows)]


def claims_chart(core: Services, ns: str, h: dict[str, Any], now: int) -> Any:
    """The queue's claims-per-minute picture."""
    per_minute = core.history.claims_per_minute((ns, h["queue"]), now, CHART_MINUTES)
    used_since = None
    if h.get("window_start_at") is not None:
        used_since = (now // MINUTE_MS) - (h["window_start_at"] // MINUTE_MS) + 1
    return charts.claims_chart(
        f"claims-{h['queue']}",
        per_minute,
        limit=h.get("max_claims"),
        used_since=used_since,
        used=h.get("used"),
        period=h.get("period"),
    )


def budgets(core: Services, session: Session, ns: str) -> dict[str, Any]:
    """The budgets page: each budget's state and its level over time."""
    listed = maybe(core, session, "budget_list", ns)
    manage = listed is not None
    items = listed["budgets"] if manage else read(core, session, "status", ns)["budgets"]
    now = core.clock.now_ms()
    since = now - CHART_MINUTES * MINUTE_MS
    for b in items:
        strategy = b["strategy"]
        cap = float(strategy.get("burst") or b["allocation"])
        samples = core.history.levels((ns, b["key"]), since)
        samples.append((now, float(b["state"]["available"])))
        b["chart"] = charts.level_chart(
            f"level-{b['key']}", samples, since_ms=since, now_ms=now, cap=cap
        )
    return {"budgets": items, "manage": manage}


def budget(core: Services, session: Session, ns: str, key: str) -> dict[str, Any]:
    """One budget and its audit history (the editor)."""
    found = read(core, session, "budget_get", ns, key=key)["budget"]
    return {"budget": found, "audit": maybe_audit(core, session, ns, "budget", key)}


#: Quota limits and the usage figure each is measured against (``status.quota.usage``).
QUOTA_ROWS = (
    ("max_pending", "pending", "scheduled and pending jobs"),
    ("max_running", "running", "running jobs"),
    ("enqueue_rate", "enqueue_tokens", "enqueue tokens left"),
    ("max_archived_rows", "completed", "completed rows kept"),
    ("max_dead_rows", "dead", "dead letters kept"),
    ("max_waiting_claims", "waiting_claims", "waiting claims"),
    ("max_retained_bytes", "retained_bytes", "retained bytes"),
    ("monthly_jobs_quota", "monthly_jobs", "jobs this month"),
    ("request_rate", None, "request tokens"),
    ("message_rate", None, "message tokens"),
    ("max_item_bytes", None, "largest payload"),
    ("max_queues", "queues", "queues"),
    ("max_retention_ms", None, "longest retention"),
)


def quota(core: Services, session: Session, ns: str) -> dict[str, Any]:
    """The quota page: each limit of the document beside its usage."""
    got = maybe(core, session, "quota_get", ns)
    status = read(core, session, "status", ns)["quota"]
    doc = (got or {}).get("quota") or (status or {})
    usage = (status or {}).get("usage") or {}
    door = usage.get("door") or {}
    rows = []
    for field, used_key, words in QUOTA_ROWS:
        if field not in doc and (used_key is None or used_key not in usage):
            continue
        used = usage.get(used_key) if used_key else None
        if used is None and isinstance(door, dict) and field in door:
            used = door[field]
        rows.append({"field": field, "limit": doc.get(field), "used": used, "words": words,
                     "blocking": _blocking(field, usage)})  # fmt: skip
    return {
        "rows": rows,
        "source": (got or {}).get("source"),
        "error": (got or {}).get("error") or (status or {}).get("error"),
        "present": bool(doc) or bool(status),
        "visible": got is not None or status is not None,
        "on_excess": doc.get("on_excess"),
        "enforce": doc.get("enforce"),
    }


def _blocking(field: str, usage: dict[str, Any]) -> str | None:
    """Why a storage or monthly block holds now, in words (None: it does not)."""
    if field == "max_retained_bytes" and usage.get("storage_blocked"):
        return "blocking enqueues until the retained bytes fall below the release band"
    if field == "monthly_jobs_quota" and usage.get("monthly_blocked"):
        return f"blocking enqueues until {usage.get('month')} ends (UTC)"
    return None


def audit(core: Services, session: Session, ns: str, after: int | None) -> dict[str, Any] | None:
    """The namespace's audit history, newest first, a page at a time."""
    args: dict[str, Any] = {"newest_first": True, "limit": 50}
    if after is not None:
        args["after"] = after
    found = maybe(core, session, "audit_list", ns, **args)
    if found is not None:
        with_changes(found["records"])
    return found


def maybe_audit(
    core: Services, session: Session, ns: str, kind: str, target: str
) -> list[dict[str, Any]] | None:
    """An item's audit history, newest first (None: the token may not read it)."""
    found = maybe(
        core,
        session,
        "audit_list",
        ns,
        target_kind=kind,
        target=target,
        newest_first=True,
        limit=20,
    )
    return None if found is None else with_changes(found["records"])


#: Audit fields that change with every write, so say nothing about what changed.
_BOOKKEEPING = frozenset(
    {"created_at", "updated_at", "created_by", "updated_by", "state", "queue", "key"}
)


def with_changes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each record with ``changes``: the fields that differ, as ``field: old → new``."""
    for r in records:
        before, after = r.get("before"), r.get("after")
        if not isinstance(before, dict) or not isinstance(after, dict):
            before = before if isinstance(before, dict) else {}
            after = after if isinstance(after, dict) else {}
        keys = sorted((set(before) | set(after)) - _BOOKKEEPING)
        r["changes"] = [
            f"{k}: {_show(before.get(k))} → {_show(after.get(k))}"
            for k in keys
            if before.get(k) != after.get(k)
        ]
    return records


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if v is not None)
    return str(value)
