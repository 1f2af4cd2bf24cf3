"""Reopening saved notebooks in a real JupyterLab + Chromium: the DAGs drawn from the file.

Run: ``python benchmarks/bench_dag_reopen.py [--rounds N] [--big]`` (or ``python
benchmarks/run.py dag_reopen``; ``--big``: only the 5,000-node view, no 100-cell run).
Needs /usr/bin/chromium and the playwright package; without them it says so and prints
nothing else.  No kernel is involved in what is timed: nothing is run.

What is measured (issue 10's budgets in brackets), each round in the same server:

- **100-cell notebook**: ``openprogram run`` of 100 ``%%openprogram`` cells (each a turn
  with two functions and two LLM calls), opened in Lab; timed from navigation until every
  one of the 100 DAG outputs has its nodes drawn, then a frame painted.  **Baseline**: the
  same file with the DAG outputs removed (the cells' other outputs kept), timed until the
  last cell's output is in the page, then a frame.  Rounds alternate the two; medians and
  spread [DAGs ≤ 1.5× the baseline].  File sizes are printed beside them.
- **5,000-node whole-session view** (what ``%openprogram dag`` saves, every turn unfolded):
  a notebook with that one output; the renderer's own time, from the moment its element
  is created until the rows are drawn and a frame painted [≤ 1 s, as the live one], and
  navigation → drawn beside it; alternating with the same view whose data is saved as an
  object (how notebooks saved it before large views became JSON text: JupyterLab then
  deep-copies the 4 MB part at each of its reads).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CELLS = 100
NODES = 5_000
DAG_MIME = "application/vnd.openprogram.dag+json"

# Installed before Lab's scripts: the time each saved-DAG renderer element appears.
INIT = """
window.__opDag = { created: [] };
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes) {
    if (n.nodeType !== 1) continue;
    if (n.classList.contains('op-dag-output') || n.querySelector('.op-dag-output'))
      window.__opDag.created.push(performance.now());
  }
}).observe(document, { childList: true, subtree: true });
"""
# Resolve with performance.now() once `test()` holds, then a frame painted.
WAIT = """
(test) => new Promise((resolve) => {
  const check = new Function('return (' + test + ')()');
  const tick = () => {
    if (check()) requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0));
    else setTimeout(tick, 5);
  };
  tick();
})
"""
ALL_DAGS = """() => {
  const dags = document.querySelectorAll('.jp-OutputArea-output .op-dag');
  return dags.length === %d && [...dags].every((d) => d.querySelector('g.op-node'));
}"""
LAST_OUTPUT = """() => {
  const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');
  return cells.length === %d && !!cells[cells.length - 1].querySelector('.jp-OutputArea-output');
}"""
BIG_DAG = """() => {
  const d = document.querySelector('.jp-OutputArea-output .op-dag');
  return !!d && d.dataset.rows === '%d' && !!d.querySelector('g.op-node');
}"""


def make_notebooks(root: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """The 100-cell notebook (``openprogram run``) and the same without its DAG outputs."""
    import subprocess

    import nbformat

    from tests.browser.agents import AGENTS, LOAD
    from tests.browser.jupyterlab import write_notebook

    with_dags = root / "dags.ipynb"
    cells = [LOAD, AGENTS] + [
        f'%%openprogram\nhandle("ticket number {i}: the app crashes on save")' for i in range(CELLS)
    ]
    write_notebook(with_dags, cells)
    proc = subprocess.run(
        [sys.executable, "-m", "openprogram.cli", "run", str(with_dags)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    nb = nbformat.read(with_dags, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if DAG_MIME not in o.get("data", {})]
    without = root / "plain.ipynb"
    nbformat.write(nb, without)
    return with_dags, without


def make_big(root: Path, *, as_object: bool = False) -> Path:
    """A notebook whose one output is ``%openprogram dag`` of 5,000 nodes, all unfolded;
    ``as_object``: its data as notebooks saved it before large views became JSON text."""
    import nbformat

    from openprogram.view.saved import read_saved
    from openprogram_magics.widget import DagWidget, SavedDag
    from tests.dag_sample import sample_nodes

    nodes = sample_nodes(NODES)
    data, _ = SavedDag(
        DagWidget(nodes, nodes[-1]["id"], title="5,000 nodes", last_turns=None)
    )._repr_mimebundle_()  # type: ignore[misc]
    if as_object:
        data[DAG_MIME] = read_saved(data[DAG_MIME])
    big = nbformat.v4.new_notebook()
    big.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    cell = nbformat.v4.new_code_cell("%openprogram dag")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
    big.cells = [cell]
    big_path = root / ("big_object.ipynb" if as_object else "big.ipynb")
    nbformat.write(big, big_path)
    return big_path


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f} ms  ({min(values):.0f}-{max(values):.0f})"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
    only_big = "--big" in args
    sys.path.insert(0, str(REPO))
    from tests.browser.jupyterlab import NOTEBOOK, LabServer, browser_skip_reason, chromium

    reason = browser_skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with LabServer.start(root_dir=root) as server, chromium() as browser:
            big, old = make_big(root), make_big(root, as_object=True)
            dags, plain = (big, big) if only_big else make_notebooks(root, server.env)
            if not only_big:
                print(
                    f"files: {CELLS} cells with DAGs {dags.stat().st_size / 1024:.0f} KiB, "
                    f"without {plain.stat().st_size / 1024:.0f} KiB"
                )
            print(
                f"files: 5,000-node view {big.stat().st_size / 1024:.0f} KiB "
                f"(data as an object: {old.stat().st_size / 1024:.0f} KiB)"
            )
            cells = CELLS + 2

            def reopen(name: str, test: str) -> dict[str, float]:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.add_init_script(INIT)
                page.goto(server.lab_url(name), wait_until="commit")
                page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=120_000)
                done = float(page.evaluate(WAIT, test))
                created = page.evaluate("() => window.__opDag.created")
                nav = done  # performance.now() counts from the navigation
                context.close()
                server.shutdown_notebook_kernels(name)
                return {"nav": nav, "renderer": done - min(created) if created else float("nan")}

            with_dags: list[float] = []
            baseline: list[float] = []
            for r in range(0 if only_big else rounds):
                order = [
                    (dags.name, ALL_DAGS % CELLS, with_dags),
                    (plain.name, LAST_OUTPUT % cells, baseline),
                ]
                for name, test, sink in order if r % 2 == 0 else order[::-1]:
                    sink.append(reopen(name, test)["nav"])
            views: dict[str, dict[str, list[float]]] = {
                name: {"nav": [], "renderer": []} for name in (big.name, old.name)
            }
            for r in range(rounds):  # the two forms alternate
                for name in (big.name, old.name) if r % 2 == 0 else (old.name, big.name):
                    got = reopen(name, BIG_DAG % NODES)
                    views[name]["nav"].append(got["nav"])
                    views[name]["renderer"].append(got["renderer"])
            big_nav, big_render = views[big.name]["nav"], views[big.name]["renderer"]
            old_nav, old_render = views[old.name]["nav"], views[old.name]["renderer"]

    rows = [
        (f"saved {NODES:,}-node view: renderer", spread(big_render), "≤ 1 s"),
        (f"saved {NODES:,}-node view: navigation → drawn", spread(big_nav), ""),
        ("  the same, data saved as an object: renderer", spread(old_render), "before"),
        ("  the same, data saved as an object: navigation → drawn", spread(old_nav), ""),
    ]
    if not only_big:
        ratio = statistics.median(with_dags) / statistics.median(baseline)
        rows[:0] = [
            (f"reopen {CELLS} cells, DAGs drawn", spread(with_dags), "≤ 1.5× baseline"),
            (f"reopen {CELLS} cells, no DAG outputs", spread(baseline), "baseline"),
            ("  ratio of medians", f"{ratio:10.2f}×", "≤ 1.5×"),
        ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure (median, min-max over ' + str(rounds) + ' rounds)':<{width}}")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>28}  {target}")
    print(f"({time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
