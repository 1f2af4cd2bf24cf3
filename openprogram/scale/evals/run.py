"""``openprogram.evaluate``: a function over a set of cases, each output scored, recorded.

The evaluation is a ``function`` node of the current turn (``evaluate <fn>``); the cases
run through :func:`openprogram.map` under it — on threads, a process pool or a Dask
cluster — each a ``case <key>`` node holding the function's call and the scorers' calls
(see :mod:`openprogram.scale.evals.runner`).  When the session holds an earlier evaluation
of the same function with some of the same case keys, the calls of a case that is not
stale are answered from that recording (:mod:`openprogram.scale.evals.reuse`: only the
cases, and calls, whose prompts changed are sent), and the result is compared with it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from openprogram.agentic_programming.function import get_current_runtime, run_in_session
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import make_call
from openprogram.context.outcome import finish
from openprogram.errors import UserError
from openprogram.scale.evals.cases import Case, cases_of, scorer_name
from openprogram.scale.evals.recording import EVAL_META, case_recordings, earlier_evaluation
from openprogram.scale.evals.result import EvalResult, compare_results, result_of
from openprogram.scale.evals.reuse import ReuseProvider
from openprogram.scale.evals.runner import CaseOutcome, CaseRunner
from openprogram.scale.run import map as map_items
from openprogram.store.vars import get_call_id, get_store, using_call_id


def evaluate(
    fn: Callable[..., Any],
    cases: Iterable[Any] | Mapping[Any, Any],
    *,
    scorers: Sequence[Callable[..., Any]] = (),
    executor: Executor | Any = None,
    max_in_flight: int | None = None,
    reuse: bool = True,
    progress: bool = True,
    runtime: Runtime | None = None,
) -> EvalResult:
    """Run ``fn`` over ``cases``, score each output, record it all, and return the result.

    ``cases``: a list of inputs, of ``{"input": …, "expected": …, "id": …}`` dicts, or a
    dict ``{key: case}``; a case's key pairs it with the same case of an earlier
    evaluation.  ``scorers``: callables ``scorer(case, output)`` returning a number, a
    bool or a dict of them; an ``@agentic_function`` scorer is an LLM judge whose
    docstring is its rubric.  ``executor``: as for :func:`openprogram.map` (threads by
    default, a process pool, a Dask ``Client``).  ``reuse``: answer the calls of cases that
    are not stale from the earlier evaluation of ``fn`` in this session (False: send all).
    The result shows a table, and how it compares with that earlier evaluation.
    """
    if not callable(fn):
        raise UserError(f"evaluate needs a function, got {type(fn).__name__}")
    for scorer in scorers:
        if not callable(scorer):
            raise UserError(f"evaluate: a scorer is a callable, got {type(scorer).__name__}")
    run = _Evaluation(fn, cases_of(cases), list(scorers), executor, max_in_flight, reuse, progress)
    result: EvalResult = run_in_session(run.run, runtime)
    return result


def function_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__agentic_name__", None) or getattr(fn, "__name__", None) or fn)


class _Evaluation:
    def __init__(
        self,
        fn: Callable[..., Any],
        cases: list[Case],
        scorers: list[Callable[..., Any]],
        executor: Any,
        max_in_flight: int | None,
        reuse: bool,
        progress: bool,
    ) -> None:
        self.fn = fn
        self.cases = cases
        self.scorers = scorers
        self.executor = executor
        self.max_in_flight = max_in_flight
        self.reuse = reuse
        self.progress = progress
        self.label = function_name(fn)

    def run(self, runtime: Runtime | None) -> EvalResult:
        writer = get_store()
        assert writer is not None
        session = writer.session
        keys = [c.key for c in self.cases]
        before_nodes = session.nodes()
        earlier = earlier_evaluation(before_nodes, self.label, keys)
        runtime = runtime if runtime is not None else get_current_runtime()
        provider = runtime.provider if runtime is not None else None
        if earlier is not None and self.reuse and runtime is not None and provider is not None:
            recordings = case_recordings(earlier, before_nodes)
            runtime = copy.copy(runtime)
            runtime.provider = ReuseProvider(provider, recordings)
        names = [scorer_name(s) for s in self.scorers]
        caller = get_call_id()
        node = make_call(
            "function",
            f"evaluate {self.label}",
            input={"function": self.label, "cases": keys, "scorers": names},
            caller=caller,
        )
        node.metadata[EVAL_META] = {"function": self.label, "scorers": names, "cases": len(keys)}
        writer.append(node, turn_level=caller is None)
        started = time.perf_counter()
        try:
            with using_call_id(node.id):
                values = map_items(
                    _Runner(self.fn, self.scorers, self.label),
                    self.cases,
                    executor=self.executor,
                    max_in_flight=self.max_in_flight,
                    progress=self.progress,
                    runtime=runtime,
                )
        except BaseException as exc:
            finish(node, exc=exc, with_traceback=True, started=started)
            writer.update(node)
            raise
        outputs = {v.key: v.output for v in values if isinstance(v, CaseOutcome)}
        nodes = session.nodes()
        result = result_of(node, nodes, session_id=writer.session_id, outputs=outputs)
        if earlier is not None:
            before = result_of(earlier, nodes, session_id=writer.session_id)
            result.comparison = compare_results(before, result, nodes)
            node.metadata["compared_with"] = earlier.id
        finish(node, output=result.summary(), started=started)
        writer.update(node)
        return result


class _Runner(CaseRunner):
    """The item function of the map (named after the evaluated function in its progress
    line and in the error node of a case that never ran)."""

    def __init__(
        self, fn: Callable[..., Any], scorers: Sequence[Callable[..., Any]], label: str
    ) -> None:
        super().__init__(fn, scorers)
        self.__name__ = f"evaluate {label}"
