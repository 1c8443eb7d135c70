"""Queue admission policies (seed 002): the model and one queue's admission state.

A policy caps a queue (a ``(namespace, queue)``) by jobs in flight
(``max_in_flight``) and by claims per calendar window
(``max_claims_per_window`` over a :class:`~actors.window.Window`, or several
windows at once: ``windows``, :mod:`actors.claim_windows`). Zero pauses.
A queue without a policy pays one dictionary lookup and nothing else.

:class:`PolicyState` holds a policy with its live numbers: claims charged to
each window's current window, and the in-flight and charge changes of
transactions not yet committed, so two claims in one group transaction cannot
both take the last unit. Decisions are synchronous; every change returns its
inverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from actors.claim_windows import MAX_CLAIMS, ClaimWindow, WindowUsage, parse_windows
from actors.errors import invalid
from actors.group_policy import GROUP_FIELDS, NO_GROUPS, GroupPolicy, parse_group_policy
from actors.group_ring import GroupRing
from actors.shadow import POLICY_GROUP, POLICY_IN_FLIGHT, POLICY_WINDOW, parse_enforce
from actors.window import Window, parse_window

MAX_IN_FLIGHT = 10_000
Undo = Callable[[], None]

#: Statuses of a policy queue (metrics and ``admission_status``), admitted first.
STATUSES = (
    "admitted", "window_exhausted", "in_flight_full", "paused", "admission_unavailable",
    "group_in_flight_cap", "reserved_for_other_groups",
)  # fmt: skip


@attrs.frozen
class Policy:
    """A queue's admission policy (the settings, without live numbers)."""

    max_in_flight: int | None = None
    max_claims_per_window: int | None = None
    window: Window | None = None
    #: Stacked windows (the ``windows`` form; then the two fields above are None).
    windows: tuple[ClaimWindow, ...] | None = None
    #: How claims are shared among the queue's groups (actors.group_policy).
    groups: GroupPolicy = NO_GROUPS
    #: False: shadow mode (actors.shadow): evaluated and counted, holds nothing back.
    enforce: bool = True

    def claim_windows(self) -> tuple[ClaimWindow, ...]:
        """Every claim window, the single-window form being a one-element list."""
        if self.windows is not None:
            return self.windows
        if self.max_claims_per_window is not None and self.window is not None:
            return (ClaimWindow(self.max_claims_per_window, self.window),)
        return ()

    def to_dict(self) -> dict[str, Any]:
        """The policy's fields on the wire, in the form it was given (the group
        fields when any is set)."""
        out: dict[str, Any]
        if self.windows is not None:
            out = {
                "max_in_flight": self.max_in_flight,
                "windows": [w.to_dict() for w in self.windows],
            }
        else:
            out = {
                "max_in_flight": self.max_in_flight,
                "max_claims_per_window": self.max_claims_per_window,
                "window": None if self.window is None else self.window.to_dict(),
            }
        if self.groups != NO_GROUPS:
            out.update(self.groups.to_dict())
        if not self.enforce:  # shown when false, as the group fields when set
            out["enforce"] = False
        return out


def _limit(field: str, value: Any, top: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= top:
        raise invalid(field, f"{field} must be an integer from 0 to {top}, or null")
    return value


def parse_policy(doc: Any) -> Policy:
    """Decode a policy's fields; ``invalid_argument`` naming the first bad field."""
    if not isinstance(doc, dict):
        raise invalid("policy", "a policy is an object")
    for name in doc:
        if name not in ("max_in_flight", "max_claims_per_window", "window", "windows",
                        "enforce", *GROUP_FIELDS):  # fmt: skip
            raise invalid(name, f"unknown policy field {name!r}")
    in_flight = _limit("max_in_flight", doc.get("max_in_flight"), MAX_IN_FLIGHT)
    groups = parse_group_policy(doc, in_flight)
    enforce = parse_enforce(doc.get("enforce"))
    if doc.get("windows") is not None:
        return attrs.evolve(_stacked(doc, in_flight, groups), enforce=enforce)
    claims = _limit("max_claims_per_window", doc.get("max_claims_per_window"), MAX_CLAIMS)
    window = None if doc.get("window") is None else parse_window(doc["window"])
    if in_flight is None and claims is None and groups == NO_GROUPS:
        raise invalid(
            "max_in_flight",
            "a policy sets max_in_flight, max_claims_per_window or a group field",
        )
    if claims is not None and window is None:
        raise invalid("window", "max_claims_per_window needs a window")
    if claims is None and window is not None:
        raise invalid("window", "a window applies to max_claims_per_window only")
    return Policy(in_flight, claims, window, groups=groups, enforce=enforce)


def _stacked(doc: dict[str, Any], in_flight: int | None, groups: GroupPolicy) -> Policy:
    """A policy in the ``windows`` form; the single-window fields may not be given too."""
    if doc.get("max_claims_per_window") is not None or doc.get("window") is not None:
        raise invalid("windows", "give windows, or max_claims_per_window and window, not both")
    return Policy(in_flight, windows=parse_windows(doc["windows"]), groups=groups)


@attrs.frozen
class Status:
    """Whether a policy queue admits a claim now, and if not why and until when."""

    state: str  # "admitted" | "deferred"
    reason: str | None = None
    next_eligible_at: int | None = None
    exact: bool = False
    #: ``window_exhausted`` of a ``windows`` policy: the holding window ``{period, tz}``.
    window: dict[str, str] | None = None

    @property
    def label(self) -> str:
        """One of :data:`STATUSES`."""
        return self.reason or "admitted"

    def to_dict(self) -> dict[str, Any]:
        out = {"state": self.state, "reason": self.reason,
               "next_eligible_at": self.next_eligible_at, "exact": self.exact}  # fmt: skip
        if self.window is not None:
            out["window"] = self.window
        return out


ADMITTED = Status("admitted", exact=True)


class PolicyState:
    """One queue's policy and its live numbers."""

    def __init__(self, namespace: str, queue: str) -> None:
        self.namespace = namespace
        self.queue = queue
        self._policy: Policy | None = None
        #: Each claim window's usage, in the policy's order (none without windows).
        self.meters: tuple[WindowUsage, ...] = ()
        #: Why the stored policy cannot be read or evaluated (fail closed).
        self.broken: str | None = None
        #: Claims (+) and leavers (-) of transactions not yet committed.
        self.in_flight_delta = 0
        #: The last status told to subscribers (a reopening rings once).
        self.last_label = "admitted"
        #: The boundary at which an exhausted window reopens (the reopen timer's).
        self.reopen_at: int | None = None
        self.created_at = 0
        self.updated_at = 0
        self.created_by = ""
        self.updated_by = ""
        self.source = "api"
        #: The queue's groups, when its policy counts them (daemon.admission.groups).
        self.ring: GroupRing | None = None

    def free(self, running: int) -> int | None:
        """Free in-flight slots with ``running`` committed (None: no ``max_in_flight``)."""
        policy = self.policy
        if policy is None or policy.max_in_flight is None:
            return None
        return max(0, policy.max_in_flight - running - self.in_flight_delta)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.queue)

    @property
    def policy(self) -> Policy | None:
        return self._policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        """Set the policy; its windows start empty (:meth:`roll` fills them)."""
        self._policy = policy
        windows = policy.claim_windows() if policy is not None else ()
        self.meters = tuple(WindowUsage(w) for w in windows)

    def tightest(self) -> WindowUsage | None:
        """The window with the least room (the latest to reopen among equals)."""
        return min(self.meters, key=lambda m: (m.room(), -m.end), default=None)

    def roll(self, now_ms: int, stored_usage: Callable[[str, int], int] | None = None) -> None:
        """Move every window to the one containing ``now_ms`` (see
        :meth:`WindowUsage.roll`; ``stored_usage(key, start)``)."""
        for meter in self.meters:
            meter.roll(now_ms, stored_usage)

    def status(
        self, running: int, now_ms: int, lease_hint: Callable[[], int | None] | None = None
    ) -> Status:
        """The queue's admission status with ``running`` committed jobs in flight.

        ``lease_hint`` gives ``in_flight_full``'s ``next_eligible_at`` (the
        earliest lease expiry of the queue's jobs); asked only when it applies.
        """
        if self.broken is not None:
            return Status("deferred", "admission_unavailable")
        policy = self.policy
        if policy is None or not policy.enforce:
            return ADMITTED  # a shadowed policy holds nothing back
        meters = self.meters
        self.roll(now_ms)  # first: what a paused queue shows of its windows is current too
        if policy.max_in_flight == 0 or any(m.limit.max_claims == 0 for m in meters):
            return Status("deferred", "paused")
        if meters:
            exhausted = [m for m in meters if m.exhausted]
            if exhausted:
                # Claims wait for every exhausted window: the last to reopen holds them.
                holding = max(exhausted, key=lambda m: m.end)
                named = holding.limit.name() if policy.windows is not None else None
                return Status("deferred", "window_exhausted", holding.end, True, named)
        in_flight = running + self.in_flight_delta
        if policy.max_in_flight is not None and in_flight >= policy.max_in_flight:
            hint = lease_hint() if lease_hint is not None else None
            return Status("deferred", "in_flight_full", hint, False)
        ring = self.ring
        if ring is not None and (ring.pending or ring.unknown):
            reason = ring.blocked(self.free(running))
            if reason is not None:
                hint = lease_hint() if lease_hint is not None else None
                return Status("deferred", reason, hint, False)
        return ADMITTED

    def room(self, running: int, now_ms: int) -> int | None:
        """How many claims the queue admits now (None: no limit, or shadowed). 0 when
        deferred."""
        if self.broken is not None:
            return 0
        policy = self.policy
        if policy is None or not policy.enforce:
            return None
        return self._room(policy, running, now_ms)

    @property
    def shadowed(self) -> bool:
        """A readable policy with ``enforce`` false."""
        return self.broken is None and self.policy is not None and not self.policy.enforce

    def would_room(self, running: int, now_ms: int) -> tuple[int | None, str]:
        """A shadowed policy: the room it would leave if enforcing, and the limit
        that sets it (``policy.window`` when a window is as tight as the slots;
        ``policy.group`` when only its groups' limits hold the queue)."""
        assert self.policy is not None
        room = self._room(self.policy, running, now_ms)
        if room == min((m.room() for m in self.meters), default=None):
            return room, POLICY_WINDOW
        if self.policy.max_in_flight is None or room != self.free(running):
            return room, POLICY_GROUP
        return room, POLICY_IN_FLIGHT

    def _room(self, policy: Policy, running: int, now_ms: int) -> int | None:
        room: int | None = None
        if self.meters:
            self.roll(now_ms)
            room = min(m.room() for m in self.meters)
        if policy.max_in_flight is not None:
            left = max(0, policy.max_in_flight - running - self.in_flight_delta)
            room = left if room is None else min(room, left)
        ring = self.ring
        if (
            ring is not None
            and (ring.pending or ring.unknown)
            and ring.blocked(self.free(running)) is not None
        ):
            return 0
        return room

    def charge(self, n: int, windows: int | None = None) -> Undo:
        """``n`` claims of this transaction: in flight, and charged to every window
        (only ``windows`` of them: a shadowed policy charges what it would admit)."""
        k = n if windows is None else windows
        charged = [(m, m.start) for m in self.meters]
        for meter, _start in charged:
            meter.used += k
        self.in_flight_delta += n

        def undo() -> None:
            for meter, start in charged:
                meter.uncharge(start, k)
            self.in_flight_delta -= n

        return undo

    def left_running(self, n: int = 1) -> Undo:
        """``n`` jobs of this transaction left ``running`` (a reaped lease, a completion)."""
        self.in_flight_delta -= n

        def undo() -> None:
            self.in_flight_delta += n

        return undo

    def committed(self, n: int) -> None:
        """A change of ``n`` in flight committed: the daemon's counts hold it now."""
        self.in_flight_delta -= n

    def headroom(self, running: int) -> dict[str, Any]:
        """``admission`` on a successful claim (seed 002 REQ-7); ``used`` and
        ``in_flight`` count this claim. With ``windows``, the window fields are
        the tightest window's (the least room) and ``windows`` lists each."""
        policy = self.policy
        assert policy is not None
        out: dict[str, Any] = {
            "max_in_flight": policy.max_in_flight,
            "in_flight": running + self.in_flight_delta,
        }
        tight = self.tightest()
        out["max_claims_per_window"] = tight.limit.max_claims if tight is not None else None
        out["used"] = tight.used if tight is not None else None
        out["remaining"] = tight.room() if tight is not None else None
        out["window_resets_at"] = tight.end if tight is not None else None
        if policy.windows is not None:
            out["windows"] = [m.to_dict() for m in self.meters]
        return out
