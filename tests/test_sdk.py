"""The official SDKs' shared plumbing (``providers/sdk.py``): which transport errors a
streamed reply can raise, learnt safely from any thread."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# One thread is importing httpx2 (held after the module object exists, before its code has
# run); another asks for the transport errors then: it must wait for the import, not read
# the half-made module (the first calls of a Dask worker's threads did: AttributeError).
HALF_IMPORTED = """
import importlib, importlib.abc, importlib.util, json, sys, threading
from openprogram.providers import sdk
assert "httpx2" not in sys.modules
started, release = threading.Event(), threading.Event()

class Held(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "httpx2":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        real = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                started.set()
                release.wait()
                real.exec_module(module)

        spec.loader = Loader()
        return spec

sys.meta_path.insert(0, Held())
importer = threading.Thread(target=importlib.import_module, args=("httpx2",))
importer.start()
started.wait()
result = {}

def ask():
    try:
        result["found"] = sorted(e.__name__ for e in sdk.transport_errors()[0])
    except Exception as exc:
        result["error"] = repr(exc)

def waiting_for_the_import(thread):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if "importlib._bootstrap" in frame.f_code.co_filename and "acquire" in frame.f_code.co_name:
            return True
        frame = frame.f_back
    return False

asker = threading.Thread(target=ask)
asker.start()
while asker.is_alive() and not waiting_for_the_import(asker):
    threading.Event().wait(0.001)  # polls a state the other thread reaches
release.set()
importer.join()
asker.join()
print(json.dumps(result))
"""


def test_a_thread_asking_while_another_imports_httpx2_waits_for_the_import() -> None:
    pytest.importorskip("httpx2")
    ran = subprocess.run(
        [sys.executable, "-c", HALF_IMPORTED], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout.splitlines()[-1])
    assert "error" not in got, got["error"]
    assert "TimeoutException" in got["found"]
