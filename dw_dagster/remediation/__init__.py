"""Approvals and remediation: plans proposed from a diagnosis, the approval record and gate, the remediation
job, verification, receipts and the org-wide stop (see docs/approve.md)."""
