"""Earlier turns in a prompt are plain statements a weak model can read (issue 21 item 8):
what was asked and what came back — never a cell's source with ``%%openprogram``,
``f(x) -> value`` or ``(done)``, which a small model imitates."""

from __future__ import annotations

from typing import Any

from openprogram.context.nodes import Call, make_call
from openprogram.context.outcome import finish
from openprogram.context.render import turn_messages, turn_text


def node(
    kind: str, name: str, output: Any = None, error: Exception | None = None, **kw: Any
) -> Call:
    call = make_call(kind, name, **kw)
    if error is not None:
        finish(call, exc=error)
    else:
        finish(call, output=output)
    return call


def kids_of(tree: dict[str, list[Call]]) -> Any:
    return lambda n: tree.get(n.id, [])


def test_a_cell_is_what_it_called_and_got_back() -> None:
    cell = node("turn", "cell [2]", input={"text": '%%openprogram\nt = triage("crash")\nt'})
    calls = [
        node("function", "triage", "bug", input={"ticket": "crash"}),
        node("function", "load", error=ValueError("no such file"), input={"path": "x.csv"}),
        node("llm", "openai", "Hello!", input={"content": "Say hi."}),
    ]
    messages = turn_messages(cell, kids_of({cell.id: calls}))
    assert messages == [
        {
            "role": "user",
            "content": "Earlier (cell [2]):\n"
            "- triage was called with ticket='crash' and returned 'bug'.\n"
            "- load was called with path='x.csv' and failed: ValueError: no such file.\n"
            "- The model was asked 'Say hi.' and answered 'Hello!'.",
        }
    ]
    assert turn_text(cell, kids_of({cell.id: calls})) == messages[0]["content"]


def test_a_cell_without_calls_says_which_code_ran_and_its_result() -> None:
    cell = node("turn", "cell [1]", input={"text": "%%openprogram\nx = 1 + 2"})
    assert turn_text(cell, kids_of({})) == (
        "Earlier (cell [1]), this code ran and returned nothing:\nx = 1 + 2"
    )
    valued = node("turn", "cell [3]", 3, input={"text": "%%openprogram\n1 + 2"})
    assert turn_text(valued, kids_of({})) == "Earlier (cell [3]):\n- The cell's result: 3"


def test_a_rejected_attempt_and_an_aside_are_left_out() -> None:
    cell = node("turn", "cell [4]", input={"text": "%%openprogram\nclassify('x')"})
    rejected = node("llm", "openai", "an essay", input={"content": "x"})
    rejected.metadata["rejected"] = True
    aside = node("function", "title", "A title", input={})
    aside.metadata["aside"] = True
    kept = node("function", "classify", "bug", input={"text": "x"})
    text = turn_text(cell, kids_of({cell.id: [rejected, aside, kept]}))
    assert text == "Earlier (cell [4]):\n- classify was called with text='x' and returned 'bug'."


def test_a_chat_turn_stays_a_conversation() -> None:
    turn = node("turn", "user", input={"text": "What is the weather in Paris?"})
    tool = node("tool", "weather", "sunny", input={"city": "Paris"})
    reply = node("reply", "assistant", "It is sunny in Paris.")
    messages = turn_messages(turn, kids_of({turn.id: [tool, reply]}))
    assert messages == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "user",
            "content": "Meanwhile:\nweather was called with city='Paris' and returned 'sunny'.",
        },
        {"role": "assistant", "content": "It is sunny in Paris."},
    ]


def test_a_top_level_function_call_is_one_sentence() -> None:
    call = node("function", "greet", "Hello, Ada.", input={"name": "Ada"})
    assert turn_messages(call, kids_of({})) == [
        {
            "role": "user",
            "content": "Earlier, greet was called with name='Ada' and returned 'Hello, Ada.'.",
        }
    ]
