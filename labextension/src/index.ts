/**
 * openprogram-jupyter: keeps a notebook's top-level `metadata.openprogram` in step
 * with the kernel-side module `openprogram_magics.bridge`.
 *
 * Protocol (see openprogram_magics/bridge.py):
 *  1. kernel -> frontend, fire-and-forget: the kernel opens a comm with target
 *     `openprogram.metadata` and data `{action: "set", metadata: {...}}`; we store
 *     `metadata` under the notebook's `metadata.openprogram` (the notebook becomes
 *     dirty; the user's save writes it). Anything else is ignored.
 *  2. frontend -> kernel, in order with cells: whenever a kernel becomes available
 *     (first start, kernel change, restart, auto-restart) we send one *silent*
 *     execute_request that hands the kernel `{metadata, path}` as base64'd JSON.
 *     It is queued ahead of any cell the user can run on that kernel.
 *
 *  3. DAG view -> notebook, no kernel: the "continue from here" button of a turn's
 *     detail (dag.js, live or saved) dispatches a bubbling, cancelable DOM event
 *     `openprogram-insert-cell` with `detail: {source: "%%openprogram --from NODE"}`; we
 *     insert a code cell with that source below the cell holding the view and cancel
 *     the event (so dag.js knows; without this extension it copies the line instead).
 *     Only that one line is accepted.
 *
 * It also draws the session DAG a notebook saved (see renderer.ts): for every notebook
 * the renderer is registered on the notebook's own rendermime registry, so it can hand
 * over to the live widget while the kernel has it.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { RANK, dagRendererFactory, diffRendererFactory } from './renderer';

const COMM_TARGET = 'openprogram.metadata';
const METADATA_KEY = 'openprogram';
const MAX_BYTES = 64 * 1024;

type JSONObject = { [key: string]: unknown };

/** A plain JSON object (not null, not an array). */
function isPlainObject(value: unknown): value is JSONObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** UTF-8 byte length of `value` as JSON, or Infinity if it cannot be serialised. */
function jsonBytes(value: unknown): number {
  try {
    return new TextEncoder().encode(JSON.stringify(value)).length;
  } catch {
    return Infinity;
  }
}

/** Return the metadata of a valid `{action: "set", metadata: {...}}` message, else null. */
function validSet(data: unknown): JSONObject | null {
  if (!isPlainObject(data) || data.action !== 'set') {
    return null;
  }
  const metadata = data.metadata;
  if (!isPlainObject(metadata) || jsonBytes(metadata) >= MAX_BYTES) {
    return null;
  }
  return metadata;
}

/** Base64 of the UTF-8 bytes of `text` (btoa alone only handles Latin-1). */
function base64Utf8(text: string): string {
  let binary = '';
  for (const byte of new TextEncoder().encode(text)) {
    binary += String.fromCharCode(byte);
  }
  return btoa(binary);
}

/**
 * The silent code: binds no names in the user's namespace and is quiet when
 * openprogram_magics is not installed. Only [A-Za-z0-9+/=] is interpolated.
 */
function buildCode(payload: JSONObject): string {
  const b64 = base64Utf8(JSON.stringify(payload));
  return (
    'try:\n' +
    `    __import__("openprogram_magics.bridge", fromlist=["_"]).receive_frontend_state("${b64}")\n` +
    'except Exception:\n' +
    '    pass\n'
  );
}

/** Send the notebook's stored state to `kernel` as a silent execute_request. */
function sendState(panel: NotebookPanel, kernel: Kernel.IKernelConnection): void {
  if (kernel.isDisposed || panel.isDisposed) {
    return;
  }
  const stored = panel.model?.getMetadata(METADATA_KEY);
  const metadata = isPlainObject(stored) && jsonBytes(stored) < MAX_BYTES ? stored : null;
  const code = buildCode({ metadata, path: panel.context.localPath });
  const content: KernelMessage.IExecuteRequestMsg['content'] = {
    code,
    silent: true,
    store_history: false,
    allow_stdin: false,
    stop_on_error: false
  };
  try {
    // Queued by the kernel connection if it is not connected yet, so it keeps its
    // place ahead of any cell execution sent later.
    const future = kernel.requestExecute(content, true);
    future.done.catch(() => undefined);
  } catch (err) {
    console.warn('openprogram-jupyter: could not send state to the kernel', err);
  }
}

/** Register the comm target and the restart hook on `kernel`, once, and send state. */
function attach(
  panel: NotebookPanel,
  kernel: Kernel.IKernelConnection | null | undefined,
  seen: WeakSet<Kernel.IKernelConnection>
): void {
  if (!kernel || kernel.isDisposed || seen.has(kernel)) {
    return;
  }
  seen.add(kernel);
  kernel.registerCommTarget(COMM_TARGET, (comm, openMsg) => {
    const apply = (data: unknown): void => {
      const metadata = validSet(data);
      if (metadata && panel.model && !panel.isDisposed) {
        panel.model.setMetadata(METADATA_KEY, metadata);
      }
    };
    apply(openMsg.content.data);
    comm.onMsg = msg => apply(msg.content.data);
  });
  kernel.statusChanged.connect((_, status) => {
    if (status === 'restarting' || status === 'autorestarting') {
      // The connection clears its pending queue right after emitting this status;
      // a microtask later our request is queued for the restarted kernel, ahead of
      // e.g. "Restart Kernel and Run All".
      void Promise.resolve().then(() => sendState(panel, kernel));
    }
  });
  sendState(panel, kernel);
}

const INSERT_CELL_EVENT = 'openprogram-insert-cell';
/** The one cell text a view may insert: a turn's "continue from here". */
const CONTINUE_SOURCE = /^%%openprogram --from [A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/** Insert a code cell with `source` below the cell holding `target` (else the active one). */
function insertBelow(panel: NotebookPanel, target: EventTarget | null, source: string): void {
  const notebook = panel.content;
  const holder = notebook.widgets.findIndex(
    cell => target instanceof Node && cell.node.contains(target)
  );
  if (holder >= 0) {
    notebook.activeCellIndex = holder;
  }
  NotebookActions.insertBelow(notebook);
  if (notebook.activeCell?.model.type !== 'code') {
    NotebookActions.changeCellType(notebook, 'code');
  }
  notebook.activeCell?.model.sharedModel.setSource(source + '\n');
  notebook.activeCell?.node.scrollIntoView({ block: 'nearest' });
}

/** Answer the DAG views' "continue from here" inside `panel`. */
function watchInserts(panel: NotebookPanel): void {
  panel.node.addEventListener(INSERT_CELL_EVENT, event => {
    const source = (event as CustomEvent<{ source?: unknown }>).detail?.source;
    if (typeof source !== 'string' || !CONTINUE_SOURCE.test(source) || !panel.model) {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
    insertBelow(panel, event.target, source);
  });
}

/** Hook one notebook panel: its current kernel, later kernels, and readiness. */
function watchPanel(panel: NotebookPanel): void {
  const seen = new WeakSet<Kernel.IKernelConnection>();
  const ctx = panel.sessionContext;
  ctx.kernelChanged.connect((_, change) => attach(panel, change.newValue, seen));
  attach(panel, ctx.session?.kernel, seen);
  void ctx.ready.then(() => attach(panel, ctx.session?.kernel, seen));
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'openprogram-jupyter:plugin',
  description:
    'Syncs notebook metadata.openprogram with the OpenProgram kernel bridge; draws saved session DAGs.',
  autoStart: true,
  requires: [INotebookTracker, IRenderMimeRegistry],
  activate: (
    _app: JupyterFrontEnd,
    tracker: INotebookTracker,
    rendermime: IRenderMimeRegistry
  ): void => {
    // everywhere (output views, consoles): the saved view; in notebooks: live hand-over too
    rendermime.addFactory(dagRendererFactory(null), RANK);
    rendermime.addFactory(diffRendererFactory(null), RANK);
    const hook = (panel: NotebookPanel): void => {
      const own = panel.content.rendermime;
      own.addFactory(dagRendererFactory(own), RANK);
      own.addFactory(diffRendererFactory(own), RANK);
      watchPanel(panel);
      watchInserts(panel);
    };
    tracker.forEach(hook);
    tracker.widgetAdded.connect((_, panel) => hook(panel));
  }
};

export default plugin;
