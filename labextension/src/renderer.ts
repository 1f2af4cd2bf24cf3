/**
 * The saved session DAG (`application/vnd.openprogram.dag+json`, written by every
 * `%%openprogram` turn and by `%openprogram dag`) drawn without a kernel and without
 * trust, by the same `dag.js` as the live widget.
 *
 * Ranked ahead of the widget view (ipywidgets registers it at -10): the saved data always
 * draws at once. When the data names a live widget (`widget`: its model id) and this
 * notebook's widget manager can render it, the live view is mounted hidden and takes
 * over once it has drawn; if the model is gone (kernel restarted or shut down) the live
 * renderer is dropped before anyone sees its "model not found".
 */
import { IRenderMime, IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import { Panel, Widget } from '@lumino/widgets';

import { renderSaved } from '../../openprogram/view/assets/dag.js';
import { renderSaved as renderSavedDiff } from '../../openprogram/view/assets/diff.js';

export const DAG_MIME = 'application/vnd.openprogram.dag+json';
/** `%openprogram diff --widget`'s data (openprogram_magics/diff_widget.py). */
export const DIFF_VIEW_MIME = 'application/vnd.openprogram.diff-view+json';
export const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';
/** Ahead of the widget view (-10) and of HTML (50). */
export const RANK = -20;

type SavedDag = { widget?: unknown };

/** A saved view: its mime type, how it draws its data, and what its live view draws. */
type SavedKind = {
  mime: string;
  draw: (el: HTMLElement, data: unknown) => () => void;
  drawn: string; // a selector present once the live view has drawn
  css: string;
};
const DAG_KIND: SavedKind = {
  mime: DAG_MIME,
  draw: renderSaved,
  drawn: '.op-dag',
  css: 'op-dag-output'
};
const DIFF_KIND: SavedKind = {
  mime: DIFF_VIEW_MIME,
  draw: renderSavedDiff,
  drawn: '.op-diffw',
  css: 'op-diff-output'
};

export class DagRenderer extends Panel implements IRenderMime.IRenderer {
  private saved = new Widget();
  private live: IRenderMime.IRenderer | null = null;
  private teardown: (() => void) | null = null;
  private observer: MutationObserver | null = null;

  constructor(
    private options: IRenderMime.IRendererOptions,
    private registry: IRenderMimeRegistry | null,
    private kind: SavedKind = DAG_KIND
  ) {
    super();
    this.addClass(kind.css);
    this.addWidget(this.saved);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    // Read `model.data` once: a notebook output's getter deep-copies every object-valued
    // part of the bundle (JSON stringify + parse) on each access.
    const bundle = model.data;
    const raw = bundle[this.kind.mime];
    // a large view is saved as JSON text: the output model passes strings without copying
    const data = (typeof raw === 'string' ? JSON.parse(raw) : (raw ?? {})) as SavedDag;
    this.dropLive();
    this.teardown?.();
    this.saved.node.replaceChildren();
    this.saved.show();
    this.teardown = this.kind.draw(this.saved.node, data);
    const view = bundle[WIDGET_MIME] as { model_id?: unknown } | undefined;
    const modelId = typeof data.widget === 'string' ? data.widget : view?.model_id;
    if (typeof modelId === 'string' && modelId) {
      this.mountLive(modelId);
    }
  }

  /** Render the live widget hidden; show it instead of the saved view once it draws. */
  private mountLive(modelId: string): void {
    const factory = this.registry?.getFactory(WIDGET_MIME);
    if (!factory) {
      return;
    }
    const live = factory.createRenderer({ ...this.options, mimeType: WIDGET_MIME });
    live.hide();
    live.addClass('op-dag-live');
    this.live = live;
    this.addWidget(live);
    const check = (): void => {
      if (this.live !== live) {
        return;
      }
      if (live.node.querySelector(this.kind.drawn)) {
        this.observer?.disconnect();
        this.teardown?.();
        this.teardown = null;
        this.saved.node.replaceChildren(); // one DAG in the page, not a hidden twin
        this.saved.hide();
        live.show();
      } else if (/model not found/i.test(live.node.textContent ?? '')) {
        this.dropLive();
      }
    };
    this.observer = new MutationObserver(check);
    this.observer.observe(live.node, { childList: true, subtree: true, characterData: true });
    const model = new MimeModel({
      data: { [WIDGET_MIME]: { model_id: modelId, version_major: 2, version_minor: 1 } }
    });
    live.renderModel(model).then(check, () => this.dropLive());
  }

  private dropLive(): void {
    this.observer?.disconnect();
    this.observer = null;
    if (this.live) {
      this.live.dispose();
      this.live = null;
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.dropLive();
    this.teardown?.();
    this.teardown = null;
    super.dispose();
  }
}

/** The renderer factory; `registry` is the notebook's (where its widget manager lives). */
export function dagRendererFactory(
  registry: IRenderMimeRegistry | null
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [DAG_MIME],
    defaultRank: RANK,
    createRenderer: options => new DagRenderer(options, registry)
  };
}

/** The same for `%openprogram diff --widget` (drawn by diff.js). */
export function diffRendererFactory(
  registry: IRenderMimeRegistry | null
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [DIFF_VIEW_MIME],
    defaultRank: RANK,
    createRenderer: options => new DagRenderer(options, registry, DIFF_KIND)
  };
}
