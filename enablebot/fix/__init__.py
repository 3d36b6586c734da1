"""The fix loop: config recipes, an LLM patch agent, the overlay and the verifier."""
