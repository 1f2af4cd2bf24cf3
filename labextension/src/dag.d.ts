/** openprogram/view/assets/dag.js: the DAG view shared with the live widget. */
declare module '*/dag.js' {
  /** Draw saved DAG data into `el`; returns a function that tears the view down. */
  export function renderSaved(el: HTMLElement, data: unknown): () => void;
}
