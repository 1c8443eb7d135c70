"""Issue 13 item 10: a read never creates state; the board lists namespaces that exist.

In open mode every caller is an operator, so anyone can name any namespace.
Reading one that does not exist (a board page, or a reading verb over the
socket) must not add it to the namespaces page, nor grow it.
"""

from __future__ import annotations

import re
import secrets

import httpx
import pytest

pytestmark = pytest.mark.e2e

PAGES = ("", "/quota", "/budgets", "/audit", "/q/some-queue")
READS = (
    "status",
    "list",
    "get",
    "quota_get",
    "admission_status",
    "queue_list",
    "budget_list",
    "budget_get",
    "policy_get",
    "policy_list",
    "dead_list",
    "audit_list",
    "claim_next",
)
ARGS = {
    "get": {"job_id": "01J0000000000000000000000"},
    "budget_get": {"key": "b"},
    "policy_get": {"queue": "q"},
    "claim_next": {"queues": ["q"], "wait_ms": 1},
}


def _listed(page: str) -> set[str]:
    return set(re.findall(r'<a href="/board/ns/([^"/]+)">', page))


def test_reads_of_unknown_namespaces_leave_the_namespaces_page_alone(make_daemon, connect):
    daemon = make_daemon("\n[quotas.provisioned]\nmax_pending = 10\n")
    c = connect(daemon)
    c.ok("enqueue", queue="q", type="t")
    c.ok("enqueue", queue="q", type="t", namespace="real")
    with httpx.Client(base_url=daemon.http_url, timeout=10) as http:
        before = http.get("/board/")
        assert before.status_code == 200
        assert _listed(before.text) == {"default", "real", "provisioned"}

        phantoms = [f"ghost-{secrets.token_hex(6)}" for _ in range(2000)]
        for i, name in enumerate(phantoms):
            http.get(f"/board/ns/{name}{PAGES[i % len(PAGES)]}")
        for i, name in enumerate(phantoms[: len(READS) * 20]):
            op = READS[i % len(READS)]
            c.call(op, namespace=name, **ARGS.get(op, {}))

        after = http.get("/board/")
        assert after.status_code == 200
        assert _listed(after.text) == {"default", "real", "provisioned"}
        assert not any(name in after.text for name in phantoms[:50])
        # Equal but for a few volatile bytes (times); 2,000 rows would be ~300 KB.
        assert len(after.content) <= len(before.content) + 100, (
            len(before.content),
            len(after.content),
        )
