"""Hosts: the environment that runs the engine claims calls made outside any turn.

A call of an ``@agentic_function`` (or ``ask_user``, ``llm``, ``openprogram.map``) with no
turn around it records as a turn of the process's ad-hoc session -- unless a host claims
it.  The notebook extension registers one on ``%load_ext`` and unregisters it on unload:
in a cell of the notebook, such a call becomes a turn of the notebook's session.

    from openprogram.hosts import register_bare_call_host, unregister_bare_call_host

    def host(label: str) -> contextlib.AbstractContextManager | None:
        return my_turn_scope(label) if i_am_running_a_cell() else None

    register_bare_call_host(host)

The latest host registered is asked first; one that returns None passes the call on.
A host can also open the ad-hoc session itself with the runtime it chose
(:func:`adhoc_turn`).  :func:`register_default_runtime` lets a host say which runtime a
turn entered without one gets (the notebook: the provider chosen in it), so what the user
picked reaches those calls as a value, not through the environment.  Bound methods are
held weakly: a host object that is gone is not asked.
"""

from openprogram.agentic_programming.function import (
    BareCallHost,
    adhoc_turn,
    register_bare_call_host,
    unregister_bare_call_host,
)
from openprogram.store.vars import register_default_runtime, unregister_default_runtime

__all__ = [
    "BareCallHost",
    "adhoc_turn",
    "register_bare_call_host",
    "register_default_runtime",
    "unregister_bare_call_host",
    "unregister_default_runtime",
]
