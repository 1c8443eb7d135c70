"""``explain {job_id}``: every limit that applies to one job, whether each holds it
back now and until when, and its place among its queue's claimable jobs.

Read-only and granted as ``get``; another namespace's job is ``not_found`` and
one in a queue outside the token's scope ``forbidden``. The gathering is
:mod:`daemon.admission.explain`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.admission.explain import Explainer, position
from daemon.verbs.reading import GetArgs, job_of
from daemon.verbs.table import ANY, Call, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services


@verb("explain", ANY, GetArgs)
def explain(core: Services, call: Call, a: GetArgs) -> Plan:
    """Every limit that applies to one job, in evaluation order, and its position."""
    row = job_of(core, call, a.job_id)
    holds = Explainer(core.admission, core.namespaces).holds(row, core.clock.now_ms())
    state = core.policies.get(row.namespace, row.queue)
    fair = state is not None and state.ring is not None
    return answer_now({
        "job_id": row.id, "status": row.state, "holds": [h.to_dict() for h in holds],
        "position": position(core.store.jobs, row, fair),
    })  # fmt: skip
