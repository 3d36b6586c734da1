"""The untrusted drafting side: the LLM client, prompts, context, playbook rewrites, edit formats and
the candidate search. It sees the judge only through the `Judge` callable it is handed (`fix/candidate.py`)."""
