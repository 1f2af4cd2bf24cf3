"""IPython extension: ``%load_ext openprogram_magics``.

Every ``%%openprogram`` cell becomes one turn of a git-backed OpenProgram session whose id
is kept in the notebook's metadata; ``%openprogram help`` lists the line commands.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "show_dag", "unload_ipython_extension", "use_runtime"]


def load_ipython_extension(ipython: Any) -> None:
    from openprogram_magics.cells.transform import transform_cell
    from openprogram_magics.magics import OpenProgramMagics

    magics = OpenProgramMagics(ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
    if transform_cell not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(transform_cell)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)
    from openprogram.hosts import register_bare_call_host, register_default_runtime
    from openprogram_magics import errors, outputs

    register_bare_call_host(magics.bare_call_turn)  # a plain cell's calls: the notebook's
    register_default_runtime(magics.default_runtime)  # and the provider chosen here

    errors.install(ipython)
    outputs.install(ipython)  # no secret in what the kernel sends (and a notebook saves)
    from openprogram_magics.gitcheck import tell_here

    tell_here()  # a clone whose .gitattributes names a merge driver git lacks: one line


def unload_ipython_extension(ipython: Any) -> None:
    from openprogram_magics.cells.transform import transform_cell
    from openprogram_magics.magics import OpenProgramMagics

    magics = ipython.magics_manager.registry.get("OpenProgramMagics")
    if isinstance(magics, OpenProgramMagics):
        ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
        ipython.events.unregister("post_run_cell", magics.post_run_cell)
        if magics in ipython.configurables:
            ipython.configurables.remove(magics)
        from openprogram.hosts import unregister_bare_call_host, unregister_default_runtime

        unregister_bare_call_host(magics.bare_call_turn)
        unregister_default_runtime(magics.default_runtime)
    if transform_cell in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(transform_cell)
    from openprogram_magics import errors, outputs

    errors.uninstall(ipython)
    outputs.uninstall(ipython)


def show_dag(session_id: str | None = None, **kwargs: Any) -> Any:
    """Draw a whole session's DAG (see :func:`openprogram_magics.widget.show_dag`)."""
    from openprogram_magics.widget import show_dag as _show

    return _show(session_id, **kwargs)


def use_runtime(runtime: Any, shell: Any = None) -> None:
    """Make ``runtime`` (a ``Runtime``: any provider, e.g. ``FunctionProvider`` or a local
    server's) answer this notebook's cells, until ``%openprogram provider`` or a
    ``%config OpenProgramMagics`` setting it depends on changes; None: back to the settings.

    ``shell``: the IPython shell (default: the running one), with the extension loaded."""
    from IPython import get_ipython
    from IPython.core.error import UsageError

    shell = shell if shell is not None else get_ipython()
    magics = shell.magics_manager.registry.get("OpenProgramMagics") if shell else None
    if magics is None:
        raise UsageError("openprogram_magics is not loaded: run `%load_ext openprogram_magics`")
    magics.turns.use_runtime(runtime)
