"""Evaluations: ``openprogram.evaluate(fn, cases, scorers=[...])`` runs an agentic function
over a set of cases through :func:`openprogram.map`, scores each output (plain callables,
and LLM judges whose docstring is their rubric), records cases, outputs and scores as nodes
of the turn, and compares with the earlier evaluation of the same cases — re-sending only
the calls whose prompts changed."""

from openprogram.scale.evals.cases import Case
from openprogram.scale.evals.result import CaseChange, CaseResult, EvalComparison, EvalResult
from openprogram.scale.evals.run import evaluate

__all__ = ["Case", "CaseChange", "CaseResult", "EvalComparison", "EvalResult", "evaluate"]
