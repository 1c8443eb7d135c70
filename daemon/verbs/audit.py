"""The audit trail: ``audit_list`` (grant ``manage``).

Every quota, budget, policy and queue write is recorded (PROTOCOL.md, Audit);
this verb reads the caller's namespace's records, oldest first unless
``newest_first``. Records about a queue outside the token's scope are left out
(seed 002: audit records are filtered by the caller's scope); the cursor
``next`` is the last record scanned, so a page of hidden records does not end
the listing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors.errors import invalid
from daemon.verbs.args import between, name
from daemon.verbs.table import Call, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services

TARGET_KINDS = ("queue", "budget", "namespace")


def _kind(_inst: Any, attr: attrs.Attribute, value: str | None) -> None:
    if value is not None and value not in TARGET_KINDS:
        raise invalid(attr.name, f"target_kind must be one of {', '.join(TARGET_KINDS)}")


@attrs.frozen
class AuditListArgs:
    target_kind: str | None = attrs.field(default=None, validator=_kind)
    target: str | None = attrs.field(default=None, validator=name)
    limit: int = attrs.field(default=100, validator=between(1, 1000))
    after: int | None = attrs.field(default=None, validator=between(0, 2**63 - 1))
    newest_first: bool = False


@verb("audit_list", ("manage",), AuditListArgs, manage=True)
def audit_list(core: Services, call: Call, a: AuditListArgs) -> Plan:
    """A page of the namespace's audit records, with the cursor of the next."""
    if a.target_kind == "queue" and a.target is not None and not call.session.in_scope(a.target):
        return answer_now({"records": [], "next": None})  # not the caller's: as absent
    rows = core.store.audit.list_records(
        call.namespace,
        target_kind=a.target_kind,
        target=a.target,
        after=a.after,
        limit=a.limit + 1,
        newest_first=a.newest_first,
    )
    scanned = rows[: a.limit]
    nxt = scanned[-1]["id"] if len(rows) > a.limit else None
    shown = [
        r for r in scanned if r["target_kind"] != "queue" or call.session.in_scope(r["target"])
    ]
    return answer_now({"records": shown, "next": nxt})
