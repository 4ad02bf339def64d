"""Per-request figures from ``requests.csv``: derived metrics, ITL, chunks, faults, sessions."""
