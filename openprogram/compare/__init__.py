"""Explore alternatives: pair two lines of a session call by call and say what changed.

Pure logic over recorded nodes (no I/O except :mod:`openprogram.compare.sessions`, the
adapter the notebook and the CLI call):

- :mod:`~openprogram.compare.sides`: which turns a side is (a turn, the line ending at a
  node, a run of the notebook);
- :mod:`~openprogram.compare.pairing`: a longest common subsequence over the two call trees,
  by function and position (turns anchored by their cell's text);
- :mod:`~openprogram.compare.diffs`: per pair the docstring, prompt and output diffs, the
  token / latency / cost deltas and why the answer moved; text and static HTML;
- :mod:`~openprogram.compare.stale`: turns whose cell, docstring, model or provider changed;
- :mod:`~openprogram.compare.appendix`: a methods appendix (Markdown / HTML) of a line.
"""
