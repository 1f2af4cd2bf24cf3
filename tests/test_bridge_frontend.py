"""Tests for openprogram_magics.bridge: the kernel side of the labextension protocol.

Pure tests exercise receive_frontend_state/frontend_state directly; the ``kernel`` tests
play the browser extension with nothing but jupyter_client against a real ipykernel.
"""

from __future__ import annotations

import base64
import builtins
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import openprogram_magics.bridge as bridge

REPO = Path(__file__).resolve().parents[1]
TEMPLATE_CALL = '__import__("openprogram_magics.bridge", fromlist=["_"]).receive_frontend_state('


def _b64(obj: Any) -> str:
    return base64.b64encode(json.dumps(obj).encode("utf-8")).decode("ascii")


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge, "_state", None)


# --------------------------------------------------------------------------- pure


def test_nothing_received_yet() -> None:
    assert bridge.frontend_state() is None


def test_valid_state_is_stored() -> None:
    meta = {"session_id": "s_1", "version": 3, "last_turn_id": "t_9", "note": "héllo ✓"}
    bridge.receive_frontend_state(_b64({"metadata": meta, "path": "dir/nb.ipynb"}))
    st = bridge.frontend_state()
    assert st is not None
    assert st.metadata == meta
    assert st.path == "dir/nb.ipynb"
    assert st.problem is None
    assert st.received_at > 0
    with pytest.raises(AttributeError):
        st.path = "x"  # type: ignore[misc]  # frozen


def test_null_metadata_is_valid() -> None:
    bridge.receive_frontend_state(_b64({"metadata": None, "path": "nb.ipynb"}))
    st = bridge.frontend_state()
    assert st is not None and st.metadata is None and st.path == "nb.ipynb"
    assert st.problem is None


@pytest.mark.parametrize(
    ("b64", "problem"),
    [
        ("not base64!!", "base64"),
        ("é", "base64"),
        (base64.b64encode(b"\xff\xfe{").decode(), "JSON"),
        (base64.b64encode(b"{not json").decode(), "JSON"),
        (_b64([1, 2, 3]), "not an object"),
        (_b64("just a string"), "not an object"),
        (_b64(None), "not an object"),
        (_b64({"metadata": [1], "path": "a"}), "metadata"),
        (_b64({"metadata": "s_1", "path": "a"}), "metadata"),
        (_b64({"metadata": {}, "path": 42}), "path"),
        (_b64({"metadata": {"x": "y" * (70 * 1024)}, "path": "a"}), "too large"),
        (12345, "not str"),
    ],
)
def test_malformed_state_stores_nothing(b64: Any, problem: str) -> None:
    bridge.receive_frontend_state(b64)
    st = bridge.frontend_state()
    assert st is not None
    assert st.metadata is None and st.path is None
    assert st.problem is not None and problem in st.problem
    assert "\n" not in st.problem


def test_malformed_after_valid_keeps_last_good_data() -> None:
    bridge.receive_frontend_state(_b64({"metadata": {"session_id": "s_ok"}, "path": "a.ipynb"}))
    bridge.receive_frontend_state("%%%")
    st = bridge.frontend_state()
    assert st is not None
    assert st.metadata == {"session_id": "s_ok"} and st.path == "a.ipynb"
    assert st.problem is not None and "base64" in st.problem
    bridge.receive_frontend_state(_b64({"metadata": {"session_id": "s_2"}, "path": "a.ipynb"}))
    st = bridge.frontend_state()
    assert st is not None and st.problem is None and st.metadata == {"session_id": "s_2"}


def test_path_traversal_values_are_plain_data(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fs(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"receive_frontend_state touched the filesystem: {args!r}")

    payload = {"metadata": {"session_id": "../../../etc/passwd"}, "path": "../../etc/passwd"}
    encoded = _b64(payload)
    for mod, name in [(builtins, "open"), (os, "open"), (os, "stat"), (os, "listdir")]:
        monkeypatch.setattr(mod, name, no_fs)
    bridge.receive_frontend_state(encoded)
    st = bridge.frontend_state()
    assert st is not None
    assert st.path == "../../etc/passwd"
    assert st.metadata == {"session_id": "../../../etc/passwd"}


def test_push_metadata_outside_kernel_returns_false() -> None:
    assert bridge.push_metadata({"session_id": "s_1"}) is False
    assert bridge.frontend_state() is None


def test_silent_code_matches_extension_template() -> None:
    code = bridge.silent_code("QUJD")
    assert code == (
        "try:\n"
        '    __import__("openprogram_magics.bridge", fromlist=["_"])'
        '.receive_frontend_state("QUJD")\n'
        "except Exception:\n"
        "    pass\n"
    )
    compile(code, "<silent>", "exec")
    # The TypeScript source and the committed build must send the same call.
    src = (REPO / "labextension" / "src" / "index.ts").read_text()
    assert TEMPLATE_CALL in src
    assert "openprogram.metadata" in src
    built = "".join(
        p.read_text()
        for p in (REPO / "openprogram_magics" / "labextension" / "static").glob("*.js")
    )
    assert "receive_frontend_state" in built and "openprogram.metadata" in built


def test_import_is_cheap() -> None:
    # The silent request imports this module in every kernel start: nothing beyond what a
    # kernel already has loaded (IPython is, so the package __init__ may import it).
    heavy = {"openprogram", "git", "pydantic", "anywidget", "ipywidgets", "jupyter_client", "zmq"}
    code = (
        "import sys, openprogram_magics.bridge\n"
        f"print(sorted(m for m in {sorted(heavy)!r} if m in sys.modules))"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- kernel


@pytest.fixture(scope="module")
def kc() -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    km, client = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=env)
    try:
        yield client
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def _execute(kc: Any, code: str, *, silent: bool = False, timeout: float = 10) -> list[dict]:
    """Run ``code``; return the iopub messages it caused (up to its idle status)."""
    msg_id = kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    assert reply["content"]["status"] == "ok", reply["content"]
    msgs = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        msgs.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return msgs


def _stdout(msgs: list[dict]) -> str:
    return "".join(
        m["content"]["text"]
        for m in msgs
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


@pytest.mark.kernel
@pytest.mark.timeout(60)
def test_push_metadata_opens_comm(kc: Any) -> None:
    msgs = _execute(
        kc,
        "import openprogram_magics.bridge as b\n"
        "print(b.push_metadata({'session_id': 's_1'}))\n"
        "del b",
    )
    opens = [m for m in msgs if m["msg_type"] == "comm_open"]
    assert len(opens) == 1, [m["msg_type"] for m in msgs]
    content = opens[0]["content"]
    assert content["target_name"] == "openprogram.metadata"
    assert content["data"] == {"action": "set", "metadata": {"session_id": "s_1"}}
    closes = [m for m in msgs if m["msg_type"] == "comm_close"]
    assert [c["content"]["comm_id"] for c in closes] == [content["comm_id"]]
    assert _stdout(msgs).strip() == "True"


@pytest.mark.kernel
@pytest.mark.timeout(60)
def test_silent_execute_hands_state_to_kernel(kc: Any) -> None:
    _execute(kc, "__snap = set(get_ipython().user_ns)")
    payload = {"metadata": {"session_id": "s_pre", "version": 2}, "path": "sub/nb.ipynb"}
    msgs = _execute(kc, bridge.silent_code(_b64(payload)), silent=True)
    # A silent request shows nothing: no execute_input, no output, no error.
    assert {m["msg_type"] for m in msgs} <= {"status"}, [m["msg_type"] for m in msgs]
    check = (
        "import re as __re\n"
        "__st = __import__('openprogram_magics.bridge', fromlist=['_']).frontend_state()\n"
        "__new = sorted(n for n in set(get_ipython().user_ns) - __snap\n"
        "               if not __re.fullmatch(r'_i\\d+|__snap|__re|__st', n))\n"
        "print(__import__('json').dumps({'metadata': __st.metadata, 'path': __st.path,\n"
        "      'problem': __st.problem, 'new': __new}))\n"
    )
    out = json.loads(_stdout(_execute(kc, check)))
    assert out == {
        "metadata": {"session_id": "s_pre", "version": 2},
        "path": "sub/nb.ipynb",
        "problem": None,
        "new": [],
    }
    # push_metadata updates what later reads in the same kernel see.
    after = _execute(
        kc,
        "__b = __import__('openprogram_magics.bridge', fromlist=['_'])\n"
        "__b.push_metadata({'session_id': 's_new', 'version': 3})\n"
        "print(__import__('json').dumps([__b.frontend_state().metadata, "
        "__b.frontend_state().path]))",
    )
    assert json.loads(_stdout(after)) == [{"session_id": "s_new", "version": 3}, "sub/nb.ipynb"]


@pytest.mark.kernel
@pytest.mark.timeout(60)
def test_silent_execute_is_quiet_when_package_missing(kc: Any) -> None:
    code = bridge.silent_code(_b64({"metadata": None, "path": "x"})).replace(
        "openprogram_magics.bridge", "openprogram_magics_not_installed.bridge"
    )
    msgs = _execute(kc, code, silent=True)
    assert {m["msg_type"] for m in msgs} <= {"status"}
    # Garbage base64 is swallowed in the kernel too (recorded as a problem, no traceback).
    msgs = _execute(kc, bridge.silent_code("@@not-base64@@"), silent=True)
    assert {m["msg_type"] for m in msgs} <= {"status"}
