"""The DAG where widgets are not live: static HTML + SVG, and the text tree."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from dag_sample import sample_nodes

from openprogram.view import render_static_html, render_text_tree


def mk(nid: str, seq: int, kind: str, status: str = "completed", **fields: Any) -> dict[str, Any]:
    meta = {"kind": kind, "status": status, **fields.pop("metadata", {})}
    return {
        "v": 1,
        "id": nid,
        "seq": seq,
        "turn": 1,
        "role": "code",
        "name": nid,
        "input": None,
        "output": None,
        "caller": None,
        "predecessor": None,
        "metadata": meta,
        "created_at": 0.0,
        **fields,
    }


def small_session() -> list[dict[str, Any]]:
    return [
        mk("root", 0, "root"),
        mk("t1", 1, "turn", predecessor="root", input="x = research('sparse attention')"),
        mk("f1", 2, "function", caller="t1", metadata={"doc": "Survey the topic."}),
        mk("l1", 3, "llm", caller="f1", output="three open questions"),
        mk("a1", 4, "ask_user", "awaiting", caller="f1", input="Which one?"),
        mk("e1", 5, "function", "error", caller="t1", metadata={"error": "ValueError: boom"}),
        mk("t2", 6, "turn", "running", predecessor="t1"),
        mk("w1", 7, "wizard", caller="t2"),
        mk("t2b", 8, "turn", "cancelled", predecessor="t1"),
    ]


class Elements(HTMLParser):
    """Start tags with their attributes, to assert on structure rather than on strings."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def nodes(self) -> dict[str, dict[str, str | None]]:
        return {a["data-id"] or "": a for t, a in self.tags if a.get("class") == "op-node"}


def test_node_content_is_escaped_so_nothing_runs() -> None:
    nodes = small_session()
    nodes[3]["output"] = "<script>alert('pwned')</script>"
    nodes[3]["name"] = '<img src=x onerror="alert(1)">'
    nodes[4]["id"] = 'a1" onmouseover="alert(2)'
    nodes[2]["metadata"]["doc"] = "</details></div><script>steal()</script>"
    html = render_static_html(nodes, "t2", title="<b>t</b>")

    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert('pwned')&lt;/script&gt;" in html  # (text: quotes are inert)
    tags = Elements(html).tags
    assert not [a for _, a in tags if any(k.startswith("on") for k in a)]
    assert not [t for t, _ in tags if t in ("img", "script", "iframe")]
    assert 'a1" onmouseover="alert(2)' in Elements(html).nodes()
    assert "&lt;b&gt;t&lt;/b&gt;" in html


def test_the_static_html_is_self_contained_svg_with_one_group_per_node() -> None:
    html = render_static_html(small_session(), "t2", title="demo")
    assert "<svg" in html and "</svg>" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)  # nothing fetched
    assert "@import" not in html and "url(" not in html
    nodes = Elements(html).nodes()
    assert set(nodes) == {"root", "t1", "f1", "l1", "a1", "e1", "t2", "w1", "t2b"}
    assert nodes["a1"]["data-kind"] == "ask_user" and nodes["a1"]["data-status"] == "awaiting"
    assert html.count("<details") == 1 + 9  # the list, then one entry per node
    assert "<style" not in html  # inline styles: an untrusted notebook keeps them
    assert "Survey the topic." in html  # the docstring is readable without clicking


def test_shapes_and_states_follow_kind_and_status() -> None:
    html = render_static_html(small_session(), "t2")
    pattern = re.compile(r'<g class="op-node" data-id="([^"]+)".*?</g>', re.S)
    group = {m.group(1): m.group(0) for m in pattern.finditer(html)}
    assert "<polygon" in group["root"] and "<circle" in group["t1"]  # diamond, circle
    assert "<rect" in group["f1"] and "<polygon" in group["l1"]  # square, triangle
    assert 'stroke="#dc2626"' in group["e1"] and ">!</text>" in group["e1"]  # error: red + !
    assert "stroke-dasharray" in group["t2"]  # running: dashed
    assert ">?</text>" in group["w1"] and "stroke-dasharray" in group["w1"]  # unknown kind
    assert 'opacity="0.4"' in group["t2b"]  # cancelled: faded
    assert "HEAD" in group["t2"] and "HEAD" not in group["t1"]


def test_a_long_session_draws_only_its_most_recent_rows() -> None:
    nodes = sample_nodes(3000)
    html = render_static_html(nodes, None, max_rows=200)
    assert len(Elements(html).nodes()) == 200
    assert "2800 earlier rows not shown" in html
    assert nodes[-1]["id"] in Elements(html).nodes()
    assert len(html) < 600_000


def test_the_text_tree_shows_nesting_branches_folds_head_and_flags() -> None:
    text = render_text_tree(small_session(), "t2", folded={"t2"})
    lines = text.splitlines()
    assert lines[0] == "session DAG: 9 nodes, 2 lane(s)"
    t1 = next(line for line in lines if line.startswith("● t1"))
    f1 = next(line for line in lines if "function f1" in line)
    l1 = next(line for line in lines if "llm l1" in line)
    assert f1.startswith("  ■") and l1.startswith("    ▲")  # indented by nesting
    assert "three open questions" in l1 and "x = research" in t1
    t2 = next(line for line in lines if line.startswith("● t2 "))
    assert "▸ +1 folded" in t2 and "← HEAD" in t2 and "[running]" in t2
    assert not any("wizard" in line for line in lines)  # folded away
    assert "(branch 1)" in next(line for line in lines if line.startswith("● t2b"))
    assert "ValueError: boom" in next(line for line in lines if "function e1" in line)


def test_nbconvert_html_shows_the_static_dag() -> None:
    import nbformat
    from nbconvert import HTMLExporter

    from openprogram_magics.widget import DagWidget

    widget = DagWidget(small_session(), "t2", title="exported")
    bundle = widget._repr_mimebundle_()
    assert bundle is not None
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("show_dag()")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle[0])]
    nb.cells = [cell]
    body, _ = HTMLExporter().from_notebook_node(nb)
    assert "<svg" in body and 'data-id="l1"' in body and "three open questions" in body


def test_a_new_kernel_is_marked_where_its_first_turn_begins() -> None:
    nodes = [
        mk("t1", 1, "turn", metadata={"run": "k1"}),
        mk("t2", 2, "turn", predecessor="t1", metadata={"run": "k1"}),
        mk("f2", 3, "function", caller="t2"),
        mk("t3", 4, "turn", predecessor="t2", metadata={"run": "k2"}),  # after a restart
    ]
    lines = render_text_tree(nodes, "t3").splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("── new kernel")]
    assert len(marks) == 1 and lines[marks[0] + 1].startswith("● t3")
    html = render_static_html(nodes, "t3")
    assert html.count('stroke-dasharray="6 3"') == 1  # one boundary line in the drawing


def test_python_and_dag_js_draw_with_the_same_constants() -> None:
    import json

    from openprogram.view import static
    from openprogram.view.page import dag_module_source

    style = json.loads((static.Path(static.__file__).parent / "assets" / "style.json").read_text())
    assert (
        style["row"],
        style["col"],
        style["radius"],
        style["pad"],
    ) == (static.ROW, static.COL, static.R, static.PAD)
    source = dag_module_source()  # what the live widget and the HTML page run
    assert "import " not in source.split("const NS")[0]  # no import left to resolve
    inlined = json.loads(source.split("const STYLE = ", 1)[1].split(";\n", 1)[0])
    assert inlined == style
    html = render_static_html(small_session(), "t2")
    assert f'fill="{style["kindColors"]["llm"]}"' in html  # the static SVG uses them too


class Text(HTMLParser):
    """The text a browser would read, by the element holding it (``pre``, ``title``...)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.open: list[str] = []
        self.by_tag: dict[str, list[str]] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag) :]

    def handle_data(self, data: str) -> None:
        if self.open:
            self.by_tag.setdefault(self.open[-1], []).append(data)


def test_the_html_is_one_line_that_reads_as_the_same_multi_line_text() -> None:
    """In a notebook under git a re-run changes one line of the drawing, not one per
    tooltip and ``<pre>`` line; a browser reads the line breaks as before."""
    nodes = small_session()
    nodes[3]["output"] = "line one\nline two"
    nodes[3]["metadata"]["usage"] = {"input_tokens": 5, "output_tokens": 7}
    html = render_static_html(nodes, "t2", title="demo")
    assert "\n" not in html and "\r" not in html
    text = Text(html)
    assert "line one\nline two" in text.by_tag["pre"]  # the <details> entry, as it was
    assert any(t.endswith("completed\n12 tokens") for t in text.by_tag["title"])  # 2 lines
    # where a sanitizer drops the <svg> tags, the labels are still one per line
    assert html.count('&#10;<g class="op-node"') == 9  # a line break before each node


def cell_turn() -> list[dict[str, Any]]:
    cell = {"text": "%%openprogram\nfind_the_answer()", "execution_count": 3}
    return [
        mk("t1", 1, "turn", input=cell),
        mk("f1", 2, "function", caller="t1", output="forty-two", metadata={"doc": "Find it."}),
        mk("e1", 3, "function", "error", caller="t1", metadata={"error": "ValueError: boom"}),
    ]


def test_a_cells_own_drawing_leaves_out_the_cell_text_and_details_all_but_errors() -> None:
    """Under its cell, a turn's drawing does not repeat the cell's text (the cell shows
    it), marks no HEAD (it is the turn itself), and details only its errors."""
    nodes = cell_turn()
    whole = render_static_html(nodes, "t1")
    assert "find_the_answer" in whole and "HEAD" in whole and "Find it." in whole
    html = render_static_html(nodes, "t1", cell="t1")
    assert "find_the_answer" not in html and "HEAD" not in html
    assert set(Elements(html).nodes()) == {"t1", "f1", "e1"}  # every node drawn
    assert "forty-two" in html  # the label's preview
    assert html.count("<details") == 1 + 1 and "ValueError: boom" in html  # the error's
    assert "Find it." not in html  # (the completed call's detail is the session's)

    text = render_text_tree(nodes, "t1", cell="t1", usage=False).splitlines()
    assert text[0].startswith("● t1") and "find_the_answer" not in "\n".join(text)
    assert "forty-two" in text[1]


def test_a_cells_turn_that_failed_keeps_its_error_in_view() -> None:
    nodes = cell_turn()[:1]
    nodes[0]["metadata"] = {"kind": "turn", "status": "error", "error": "NameError: x"}
    html = render_static_html(nodes, "t1", cell="t1")
    assert "NameError: x" in html and "<details" in html
    assert "NameError: x" in render_text_tree(nodes, "t1", cell="t1")


def test_the_text_tree_can_leave_usage_to_one_total() -> None:
    from openprogram.view import compute_layout
    from openprogram.view.static import usage_text

    nodes = small_session()
    nodes[3]["metadata"]["usage"] = {"input_tokens": 5, "output_tokens": 7}
    nodes[5]["metadata"]["usage"] = {"input_tokens": 1, "output_tokens": 2}
    assert "12 tok" in render_text_tree(nodes, "t2")
    assert " tok" not in render_text_tree(nodes, "t2", usage=False)
    assert usage_text(compute_layout(nodes, "t2")) == "15 tok"
    assert usage_text(compute_layout(small_session(), "t2")) == ""
