"""A streamed reply as ONE output of its cell, updated in place as the text arrives.

A reply the model streams into a cell (a plain ``%%openprogram`` cell's top-level
``runtime.exec``, a ``%%openprogram --chat`` cell's reply) is written to a
:class:`ReplyOutput`: one ``display_data`` output whose text grows with every update.  A
frontend shows it grow, and a notebook saved by any client (JupyterLab, nbclient,
papermill) holds the whole reply as one output, not one ``stream`` output per piece (which
nbconvert's HTML shows as one piece per line).  A terminal IPython prints every display
instead of updating it, so there (:func:`updates_in_place` false) the reply streams to
stdout.  Secrets are masked before the text gets here (the echo's ``SecretStream``) and
again on the kernel's way out (:mod:`openprogram_magics.outputs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: At most one update of a streaming reply's output per this many seconds (a finished line,
#: a reply's end, a note, is shown at once).  0: every piece is shown as it arrives, so a
#: model that pauses never leaves its last pieces unseen.  A timer that showed held-back
#: text was tried: its update, sent from another thread, could reach the frontend after the
#: final one and leave the reply cut in the saved notebook.
UPDATE_EVERY_S = 0.0


def updates_in_place(shell: Any) -> bool:
    """Whether ``shell``'s displays go to a frontend that updates them (a kernel, a
    capturing publisher); a terminal IPython prints each display instead."""
    from IPython.core.displaypub import DisplayPublisher

    pub = getattr(shell, "display_pub", None)
    return pub is not None and type(pub) is not DisplayPublisher


class ReplyOutput:
    """A writable text stream whose whole text is one display, updated in place."""

    def __init__(self, every_s: float | None = None) -> None:
        self.text = ""
        self.every_s = UPDATE_EVERY_S if every_s is None else every_s
        self._handle: Any = None
        self._shown = ""  # the text the display holds
        self._last = 0.0

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        """Show the text now when due: the first piece, a finished line (a reply's end, a
        note), else at most every ``every_s`` seconds."""
        due = time.monotonic() - self._last >= self.every_s
        if self._handle is None or due or self.text.endswith("\n"):
            self._publish()

    def close(self) -> None:
        """Send the whole text (a final update when a throttled one left some out)."""
        if self.text != self._shown:
            self._publish()

    def writable(self) -> bool:
        return True

    def _publish(self) -> None:
        from IPython.display import display

        if not self.text or self.text == self._shown:
            return
        data = {"text/plain": self.text}
        if self._handle is None:
            self._handle = display(data, raw=True, display_id=True)
        else:
            self._handle.update(data, raw=True)
        self._shown, self._last = self.text, time.monotonic()


def reply_outputs(shell: Any = None) -> Callable[[], ReplyOutput] | None:
    """What makes each streamed reply's output in ``shell`` (default: the running IPython):
    a new :class:`ReplyOutput` per reply, or None where displays are not updated in place
    (a terminal IPython, no IPython at all: the reply streams to stdout)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        shell = get_ipython()
    return ReplyOutput if shell is not None and updates_in_place(shell) else None
