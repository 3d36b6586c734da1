"""The trusted judge: the patch guard, the overlay, the gates, the verifier, the custody chain.
Nothing here imports the drafting side (`fix/draft/`)."""
