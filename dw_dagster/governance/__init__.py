"""Data governance: new columns that look sensitive are flagged to the governance owners; nothing is changed."""
