"""`enablebot replay`: the nightly re-enacted over past transformers releases (day 0, follow-up, fixes)."""
