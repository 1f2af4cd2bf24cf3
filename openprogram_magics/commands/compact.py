"""``%openprogram compact``: summarise older turns now (the chat dispatcher's compaction)."""

from __future__ import annotations

from argparse import Namespace

from openprogram_magics.commands import Host, command, session_or_current


@command("compact", "summarise older turns now (kept in the session; prompts use the summary)")
def compact(host: Host, args: Namespace) -> str | None:
    from openprogram.agent.dispatcher import trigger_compaction

    sid = session_or_current(host, None)
    summary = trigger_compaction(sid, runtime=host.runtime())
    if summary is None:
        print("openprogram: nothing to compact (the newest turns are kept as they are)")
    else:
        from openprogram.agent.session_db import default_db

        node = default_db().open(sid).get(summary)
        covers = len(node.metadata.get("covers", []))
        by = node.metadata.get("written_by")
        print(f"openprogram: summary {summary} stands for {covers} earlier turns (written by {by})")
    return summary
