/** openprogram/view/assets/dag.js: the DAG view shared with the live widget. */
declare module '*/dag.js' {
  /** Draw saved DAG data into `el`; returns a function that tears the view down. */
  export function renderSaved(el: HTMLElement, data: unknown): () => void;
}

/** openprogram/view/assets/diff.js: `%openprogram diff --widget`'s view. */
declare module '*/diff.js' {
  /** Draw saved diff data into `el`; returns a function that tears the view down. */
  export function renderSaved(el: HTMLElement, data: unknown): () => void;
}
