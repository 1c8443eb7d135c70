"""Admission: what decides whether a job may enter and when it may run.

:mod:`~daemon.admission.door` (per-token rate and concurrency at the door),
:mod:`~daemon.admission.quotas` (per-namespace job counts),
:mod:`~daemon.admission.policies` (queue policies: windows and caps),
:mod:`~daemon.admission.budget_gate` (budgets: debits, parking and release),
:mod:`~daemon.admission.admin_limit` (the admin write limiter),
:mod:`~daemon.admission.usage` (usage metering) and
:mod:`~daemon.admission.policy_provision` (policies from the config file).
The order of evaluation is door, quota, policy, budget (docs/door.md).

Admission sits below the verbs and above the store: it never imports a
transport or a verb. This ``__init__`` imports nothing.
"""
