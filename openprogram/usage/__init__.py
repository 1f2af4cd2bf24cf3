"""Tokens and cost: prices (``prices``), totals over recorded nodes (``totals``), and the
budget that stops a call before it would be exceeded (``budget``)."""

from openprogram.errors import BudgetExceeded
from openprogram.usage.budget import Budget
from openprogram.usage.prices import Price, price_call, set_price
from openprogram.usage.totals import Totals, usage_rows, usage_table

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Price",
    "Totals",
    "price_call",
    "set_price",
    "usage_rows",
    "usage_table",
]
