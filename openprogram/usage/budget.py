"""A budget in tokens and/or US dollars that stops calls *before* they would exceed it.

Before each LLM call the Runtime asks :meth:`Budget.admit`: the request's input tokens are
estimated up front (characters / 3 plus a few per message — generous, so the estimate
errs high), and what is left after them becomes the request's ``max_tokens`` (in dollars:
converted at the model's output price), so the reply cannot carry the total past the
budget either.  When too little is left for a useful reply the call is not sent: an
``error`` node named ``budget`` says why, and :class:`BudgetExceeded` is raised.

``per="session"``: everything the session's recorded ``llm`` nodes used counts (the
totals the session's index keeps, read the first time a session is seen — no node file —
then kept up to date by this process).
``per="run"``: only this turn — one cell, one CLI run, one background run.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from openprogram.context.nodes import ERROR, make_call
from openprogram.context.policy import estimate_tokens
from openprogram.errors import BudgetExceeded, UserError
from openprogram.settings import current as current_settings
from openprogram.store.session.index import usage_of
from openprogram.usage.prices import price_of

if TYPE_CHECKING:
    from openprogram.context.nodes import Call
    from openprogram.store.session.context import SessionNodeWriter
    from openprogram.usage.prices import Price


class Priced(Protocol):
    """What a budget reads of a request (an ``LLMRequest`` of the Runtime's layer, which
    is above this one)."""

    @property
    def model(self) -> str: ...

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    @property
    def tools(self) -> list[dict[str, Any]] | None: ...


MIN_REPLY_TOKENS = 16  # below this a reply is not worth sending the request for
UNCAPPED_ROOM = 16384  # more budget left than this: no max_tokens (models cap replies lower)
SCOPES = ("session", "run")


@dataclass
class Spent:
    tokens: int = 0
    cost: float = 0.0


@dataclass(eq=False)
class Hold:
    """What an admitted call may still spend (its input estimate and the most its reply may
    use), held until it ends so calls in flight together cannot overspend the budget."""

    key: tuple[str, int | None]
    tokens: int
    cost: float


@dataclass
class Budget:
    tokens: int | None = None  # input + output tokens
    usd: float | None = None
    per: str = "session"
    share_of: str | None = None  # an item's share of this map budget (see Allowance)
    _spent: dict[tuple[str, int | None], Spent] = field(default_factory=dict, repr=False)
    _held: dict[tuple[str, int | None], list[Hold]] = field(default_factory=dict, repr=False)
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def __post_init__(self) -> None:
        if self.per not in SCOPES:
            raise UserError(f"budget per={self.per!r}: choose one of {', '.join(SCOPES)}")
        if (self.tokens is not None and self.tokens <= 0) or (
            self.usd is not None and not 0 < self.usd < math.inf  # not nan, inf or 1e400
        ):
            raise UserError("a budget must be a positive finite number")

    @property
    def active(self) -> bool:
        return self.tokens is not None or self.usd is not None

    def describe(self) -> str:
        parts = [f"{self.tokens} tokens"] if self.tokens is not None else []
        parts += [f"${self.usd:g}"] if self.usd is not None else []
        if self.share_of is not None:
            return " and ".join(parts) + f" (an item's share of {self.share_of})"
        return " and ".join(parts) + f" per {self.per}"

    # -- bookkeeping -----------------------------------------------------------------------
    def _key(self, writer: SessionNodeWriter) -> tuple[str, int | None]:
        return (writer.session_id, None if self.per == "session" else writer.turn)

    def spent(self, writer: SessionNodeWriter) -> Spent:
        key = self._key(writer)
        with self._lock:
            found = self._spent.get(key)
        if found is not None:
            return found
        total = Spent()
        if self.per == "session":  # what was recorded before this process counted
            recorded = writer.session.totals()  # kept in the index: no node read
            total.tokens = recorded["input_tokens"] + recorded["output_tokens"]
            total.cost = recorded["cost"]
        with self._lock:
            return self._spent.setdefault(key, total)

    def record(self, writer: SessionNodeWriter, node: Call) -> None:
        """Count a finished llm node."""
        spent = self.spent(writer)
        with self._lock:
            _add(spent, node)

    # -- the check -------------------------------------------------------------------------
    def admit(
        self,
        writer: SessionNodeWriter,
        request: Priced,
        provider: str,
        caller: str | None,
        *,
        vendor_endpoint: bool = True,
    ) -> tuple[int | None, Hold | None]:
        """The ``max_tokens`` the request may use, and what it holds of the budget until
        :meth:`release` — or raise (after recording why).  What calls in flight may still
        spend is held: a call that does not fit beside them waits for them to end, and is
        refused only when it does not fit with nothing in flight.

        ``vendor_endpoint=False`` (a custom base URL): a dollar budget counts only a price
        the user set (:func:`~openprogram.usage.prices.set_price`); without one the call is
        refused before it is sent, saying so — the vendor's table is never assumed there."""
        if not self.active:
            return None, None
        spent = self.spent(writer)
        key = self._key(writer)
        needed = estimate_tokens(request.messages, request.tools)
        problem = None
        price = None
        if self.usd is not None:
            price = price_of(request.model, provider, vendor_endpoint=vendor_endpoint)
            if price is None:
                where = "" if vendor_endpoint else " at a custom base URL (unpriced there)"
                problem = (
                    f"a budget in dollars needs a price for model {request.model!r}{where}: "
                    "openprogram.usage.set_price(model, input, output) or prices.json"
                )
                self._refuse(writer, problem, caller, needed, spent)
        with self._lock:
            held = self._held.setdefault(key, [])
            room = self._room(spent, held, needed, price)
            while room is not None and room < MIN_REPLY_TOKENS and held:
                self._lock.wait()  # the calls in flight end, then what they used counts
                room = self._room(spent, held, needed, price)
            hold = None
            if room is None or room >= MIN_REPLY_TOKENS:
                out = getattr(request, "max_tokens", None) or UNCAPPED_ROOM  # its reply's cap
                out = out if room is None else min(out, room)
                hold = Hold(key, needed + out, price.cost(needed, out) if price else 0.0)
                held.append(hold)
        if hold is None:
            self._refuse(writer, self.why_not_sent(spent, needed, price), caller, needed, spent)
        return room, hold

    def share(self, writer: SessionNodeWriter, parts: int, price: Price | None) -> Hold | None:
        """Hold a part of what is left beside what is spent and held, until :meth:`release`,
        for calls made elsewhere (an item of a map run on another process, under the
        :meth:`allowance` of the hold): an equal part among the ``parts`` items sent
        together, but at least what one uncapped call may hold here (its reply's cap and as
        much input; dollars at ``price``), or all that is left when that is less.  None
        when nothing is left."""
        spent = self.spent(writer)
        key = self._key(writer)
        with self._lock:
            held = self._held.setdefault(key, [])
            tokens, cost = 0, 0.0
            if self.tokens is not None:
                left = self.tokens - spent.tokens - sum(h.tokens for h in held)
                if left <= 0:
                    return None
                tokens = max(left // parts, min(left, 2 * UNCAPPED_ROOM))
            if self.usd is not None:
                left_usd = self.usd - spent.cost - sum(h.cost for h in held)
                if left_usd <= 0:
                    return None
                call = price.cost(UNCAPPED_ROOM, UNCAPPED_ROOM) if price is not None else 0.0
                cost = max(left_usd / parts, min(left_usd, call))
            hold = Hold(key, tokens, cost)
            held.append(hold)
        return hold

    def allowance(self, hold: Hold) -> Allowance:
        """What the calls made elsewhere under ``hold`` may spend (see :meth:`share`)."""
        tokens = hold.tokens if self.tokens is not None else None
        return Allowance(tokens, hold.cost if self.usd is not None else None, self.describe())

    def wait_for_others(self, writer: SessionNodeWriter, timeout: float) -> bool:
        """Whether calls in flight hold part of the budget (then wait for one to end, at most
        ``timeout`` seconds: the caller looks for a stop between waits)."""
        with self._lock:
            if not self._held.get(self._key(writer)):
                return False
            self._lock.wait(timeout)
            return True

    def release(self, hold: Hold | None) -> None:
        """The call holding ``hold`` ended (what it used is :meth:`record`-ed first)."""
        if hold is not None:
            with self._lock:
                self._held[hold.key].remove(hold)
                self._lock.notify_all()

    def _room(self, spent: Spent, held: list[Hold], needed: int, price: Price | None) -> int | None:
        """Reply tokens left beside ``spent`` and what calls in flight hold."""
        allowed: list[int] = []
        if self.tokens is not None:
            allowed.append(self.tokens - spent.tokens - sum(h.tokens for h in held) - needed)
        if self.usd is not None and price is not None:
            left = self.usd - spent.cost - sum(h.cost for h in held)
            left -= needed * price.input / 1_000_000
            per_token = price.output / 1_000_000
            allowed.append(int(left / per_token) if per_token > 0 else 1 << 30)
        return min(allowed) if allowed else None

    def why_not_sent(self, spent: Spent, needed: int, price: Price | None = None) -> str:
        """Why a call needing ``needed`` input tokens (at ``price``, for a dollar budget) is
        refused after ``spent``: what it needs, and what is spent and left — or, when
        nothing is spent yet, that the call alone is more than the whole budget."""
        wants = f"about {needed} input tokens plus a reply of at least {MIN_REPLY_TOKENS}"
        if price is not None and self.usd is not None:
            wants += f" ({usd_text(price.cost(needed, MIN_REPLY_TOKENS))})"
        if spent.tokens == 0 and spent.cost == 0:
            return (
                f"budget of {self.describe()}: the next call alone needs {wants}, more than "
                f"the whole {'share' if self.share_of else 'budget'}, so it was not sent (raise "
                "the budget or shorten the prompt)"
            )
        used = [f"{spent.tokens} tokens"] if self.tokens is not None else []
        left = [f"{max(0, self.tokens - spent.tokens)} tokens"] if self.tokens is not None else []
        if self.usd is not None:
            used.append(usd_text(spent.cost))
            left.append(usd_text(max(0.0, self.usd - spent.cost)))
        return (
            f"budget of {self.describe()} reached: {' and '.join(used)} spent, "
            f"{' and '.join(left)} left; the next call needs {wants}, so it was not sent"
        )

    def _refuse(
        self, writer: SessionNodeWriter, problem: str, caller: str | None, needed: int, spent: Spent
    ) -> None:

        node = make_call(
            "error",
            "budget",
            input={"budget": self.describe(), "estimated_input_tokens": needed},
            caller=caller,
            status=ERROR,
            error=problem,
            spent={"tokens": spent.tokens, "cost": round(spent.cost, 10)},
        )
        writer.append(node, turn_level=caller is None)
        raise BudgetExceeded(problem)


@dataclass(frozen=True)
class Allowance:
    """What one item of a map run on another process may spend: its share of the map's
    budget (``of`` describes it), which the kernel holds until the item's result is back.
    The item runs under :meth:`budget`: a call that does not fit is refused as any."""

    tokens: int | None
    usd: float | None
    of: str

    def budget(self) -> Budget:
        return Budget(self.tokens, self.usd, "run", share_of=self.of)


def usd_text(usd: float) -> str:
    """Dollars with the digits a small amount needs: ``$0.00042``, ``$1.25``, ``$0.00``."""
    text = f"{usd:.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents:0<2}"


def _add(spent: Spent, node: Call) -> None:
    tokens_in, tokens_out, cost = usage_of(node.metadata)  # the index's rule
    spent.tokens += (tokens_in or 0) + tokens_out
    spent.cost += cost or 0.0


def budget_from(
    tokens: int | None = None, usd: float | None = None, per: str | None = None
) -> Budget | None:
    """A budget from the arguments (0 or None: no limit of that kind), else from the
    settings (``OPENPROGRAM_BUDGET_TOKENS``, ``OPENPROGRAM_BUDGET_USD``,
    ``OPENPROGRAM_BUDGET_PER``), so ``openprogram run`` can hand its kernels one.  None when
    nothing is set."""
    settings = current_settings()
    try:
        tokens = tokens or int(settings.budget_tokens or 0) or None
        usd = usd or float(settings.budget_usd or 0) or None
    except ValueError as exc:
        raise UserError(f"OPENPROGRAM_BUDGET_TOKENS/_USD must be numbers ({exc})") from None
    if tokens is None and usd is None:
        return None
    return Budget(tokens, usd, per or settings.budget_per or "session")
