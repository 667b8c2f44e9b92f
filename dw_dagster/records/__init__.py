"""The shared records: what incidents and fixes are made of (findings, incidents, diagnoses, blast radii,
plans, proposals, approvals, receipts), how keys are named, and the incident policy. Every layer above
reads and writes these; they import nothing of the product but its leaves."""
