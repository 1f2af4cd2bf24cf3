"""``%%openprogram --eval FN [SCORER …]``: the cell's body gives the cases, and the turn is
an evaluation of ``FN`` over them (:func:`openprogram.evaluate`).

The body is Python: its statements run in the notebook's namespace and its last expression
is the cases (a list, or a dict ``{key: case}``).  ``FN`` and the scorers are names in the
namespace; ``--executor NAME`` names an executor there (a Dask ``Client``…).  The cell is a
plain turn (its DAG drawn as every cell's) whose value is the :class:`EvalResult`: the
table, and the comparison with the earlier evaluation of ``FN`` in this session.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from openprogram_magics.cells import plain

if TYPE_CHECKING:
    from openprogram_magics.cells import CellHost
    from openprogram_magics.cells.options import CellOptions

NO_CASES = "%%openprogram --eval: end the cell with the cases (a list or a dict of them)"


def run_eval_cell(host: CellHost, args: str, opts: CellOptions, body: str, source: str) -> Any:
    shell = host.shell
    assert shell is not None and opts.eval
    namespace = shell.user_ns
    fn, *scorers = (_named(namespace, name) for name in opts.eval)
    executor = _named(namespace, opts.executor) if opts.executor else None
    plain.begin(host.turns, args, host.turns.raw_cell or source)
    cases = cases_of_body(body, namespace)
    from openprogram.scale.evals import evaluate

    return evaluate(fn, cases, scorers=scorers, executor=executor)


def cases_of_body(body: str, namespace: dict[str, Any]) -> Any:
    """Run ``body``'s statements in ``namespace``; the value of its last expression."""
    try:
        tree = ast.parse(body, "<%%openprogram --eval>")
    except SyntaxError as exc:
        raise UsageError(f"%%openprogram --eval: the cell is not Python ({exc.msg})") from None
    last_statement = tree.body.pop() if tree.body else None
    if not isinstance(last_statement, ast.Expr):
        raise UsageError(NO_CASES)
    last = ast.Expression(last_statement.value)
    exec(compile(tree, "<%%openprogram --eval>", "exec"), namespace)
    return eval(compile(last, "<%%openprogram --eval>", "eval"), namespace)


def _named(namespace: dict[str, Any], name: str) -> Any:
    if name not in namespace:
        raise UsageError(f"%%openprogram --eval: no {name!r} in the notebook's namespace")
    return namespace[name]
