"""The lease reaper and the delay timer: two :class:`~actors.due.DueActor` roles.

``LeaseReaper`` sleeps to the earliest lease expiry and returns lapsed jobs to
pending (the attempt stays counted) or to dead when their attempts are spent.
``DelayTimer`` sleeps to the earliest ``ready_at`` of a scheduled job and makes
it pending. Both are woken early by :meth:`DueActor.note` when a writer adds a
sooner instant; neither polls.
"""

from __future__ import annotations

from actors.due import DueActor


class LeaseReaper(DueActor):
    """Sleeps to the earliest lease expiry, then reaps every lapsed lease."""


class DelayTimer(DueActor):
    """Sleeps to the earliest scheduled ``ready_at``, then makes those jobs pending."""
