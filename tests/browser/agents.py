"""The notebook cells the browser tests share: load the extension, define two agents."""

TRIAGE_DOC = "Classify the ticket as bug, feature or question."
LOAD = "%load_ext openprogram_magics\n%openprogram provider test"
AGENTS = f'''\
from openprogram import agentic_function


@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """{TRIAGE_DOC}"""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])


@agentic_function
def handle(ticket: str, runtime=None) -> str:
    """You are a support lead. Draft a one-sentence reply to the customer."""
    kind = triage(ticket)
    return runtime.exec(f"The ticket is a {{kind}}: {{ticket}}")
'''
