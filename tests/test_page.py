"""The whole session as one HTML page (``view/page.py``, ``openprogram sessions show ID
--html``): one self-contained document — the interactive view's script and style inlined,
the session's data as JSON, the static drawing for readers without JavaScript — that no
text in a node can break out of."""

from __future__ import annotations

import json
import re

from test_static import Elements, small_session

from openprogram.view.page import dag_module_source, render_page

EVIL = "</script><script>alert('owned')</script><!--"


def test_a_page_is_self_contained_and_carries_every_node() -> None:
    nodes = small_session()
    page = render_page(nodes, "t2", title="Research <draft> & notes")
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>Research &lt;draft&gt; &amp; notes</title>" in page
    tags = Elements(page).tags
    assert not [a for _, a in tags if (a.get("src") or a.get("href") or "").startswith("http")]
    assert [t for t, _ in tags].count("script") == 2  # the data and the module, inline
    data = re.search(r'id="op-dag-data">(.*?)</script>', page, re.S)
    assert data is not None
    shown = json.dumps(json.loads(data.group(1)))
    assert all(node["id"] in shown for node in nodes)
    assert "<noscript>" in page and 'class="op-node"' in page  # the static drawing


def test_no_text_in_a_node_ends_the_script_it_is_in() -> None:
    nodes = small_session()
    nodes[3]["output"] = EVIL
    page = render_page(nodes, None, title="x")
    assert [t for t, _ in Elements(page).tags].count("script") == 2  # no third one opened
    assert "&lt;/script&gt;&lt;script&gt;alert" in page  # the drawing shows it as text
    data = re.search(r'id="op-dag-data">(.*?)</script>', page, re.S)
    assert data is not None and EVIL in json.dumps(json.loads(data.group(1)), ensure_ascii=False)


def test_the_module_has_its_style_inlined() -> None:
    source = dag_module_source()
    assert "import STYLE" not in source and source.count("const STYLE = {") == 1
