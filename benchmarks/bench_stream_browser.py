"""A streamed reply in a real JupyterLab + Chromium: how long after a piece leaves the
server it is in the cell's DOM (issue 12's budget: the first token ≤ 50 ms).

Run: ``python benchmarks/bench_stream_browser.py [--rounds 10]``.  Needs /usr/bin/chromium
and the playwright package (never ``playwright install``); without them it says so.

The loopback wire server (tests/wire_server.py, OpenAI SSE) runs in this process and notes
``time.time()`` when it writes each text piece; a MutationObserver in the page notes
``Date.now()`` when that piece's marker first appears in the cell's output.  Server,
kernel and browser are on this machine and read the same wall clock.  Each round sends
20 pieces 50 ms apart; the first piece and all pieces are reported (median, IQR, max).

Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PIECES = 20
SETUP = """\
%load_ext openprogram_magics
from openprogram import create_runtime, llm
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram_magics import use_runtime
use_runtime(create_runtime(OpenAIProvider(base_url={url!r}, api_key="k", model="wire")))
print("ready")
"""
CELL = '%%openprogram --no-dag\nreply = llm("go {n}")'
WATCH = """([index, sel]) => {
  window.opSeen = {};
  const out = document.querySelectorAll(sel)[index];
  const look = () => {
    const now = Date.now();
    for (const m of out.textContent.matchAll(/<p(\\d+)>/g)) {
      if (!(m[1] in window.opSeen)) window.opSeen[m[1]] = now;
    }
  };
  window.opObserver && window.opObserver.disconnect();
  window.opObserver = new MutationObserver(look);
  window.opObserver.observe(out, {childList: true, subtree: true, characterData: true});
}"""


def stats(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"{statistics.median(values):7.1f} ms (IQR {q[0]:.1f}-{q[2]:.1f}, max {max(values):.1f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import tests.wire_server as wire_server
    from tests.browser.jupyterlab import (
        NOTEBOOK,
        LabPage,
        LabServer,
        browser_skip_reason,
        chromium,
        write_notebook,
    )

    reason = browser_skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return
    sent: dict[str, float] = {}
    lock = threading.Lock()
    original = wire_server._Wire._write_chunk

    def noting(self: Any, data: bytes) -> None:
        original(self, data)
        stamp = time.time()
        for marker in data.decode(errors="replace").split("<p")[1:]:
            number = marker.split(">", 1)[0]
            if number.isdigit():
                with lock:
                    sent.setdefault(number, stamp)

    wire_server._Wire._write_chunk = noting  # type: ignore[method-assign]
    first: list[float] = []
    every: list[float] = []
    with wire_server.WireServer() as wire, tempfile.TemporaryDirectory(prefix="opstream-") as tmp:
        root = Path(tmp)
        cells = [SETUP.format(url=wire.openai_base_url)] + [
            CELL.format(n=i) for i in range(args.rounds)
        ]
        write_notebook(root / "stream.ipynb", cells)
        with LabServer.start(root_dir=root) as server, chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            lab = LabPage(page, server)
            lab.open_notebook("stream.ipynb")
            lab.wait_kernel_idle()
            assert "ready" in lab.run_cell_expect(0, 1, timeout=120_000)
            for r in range(args.rounds):
                index = r + 1
                with lock:
                    sent.clear()
                pieces = [f"<p{i}> " for i in range(PIECES)]
                wire.reply(wire_server.Reply(chunks=pieces, pace=0.05))
                page.evaluate(WATCH, [index, f"{NOTEBOOK} .jp-Cell"])
                lab.run_cell_expect(index, index + 1, timeout=60_000)
                time.sleep(0.3)
                seen = page.evaluate("() => window.opSeen")
                lags = [seen[k] - sent[k] * 1000 for k in sorted(sent, key=int) if k in seen]
                if r and lags:  # the first round warms the page up
                    first.append(lags[0])
                    every.extend(lags)
    print(f"{args.rounds - 1} rounds of {PIECES} pieces, 50 ms apart, OpenAI SSE on loopback")
    print(f"first piece: server write -> in the DOM  {stats(first)}  (budget 50 ms)")
    print(f"every piece: server write -> in the DOM  {stats(every)}")


if __name__ == "__main__":
    main()
