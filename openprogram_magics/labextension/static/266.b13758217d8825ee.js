"use strict";(self.rspackChunkopenprogram_jupyter=self.rspackChunkopenprogram_jupyter||[]).push([[266],{615(o,e,r){var t=r(601),a=r.n(t),p=r(314),n=(r.n(p))()(a());n.push([o.id,`/* The session DAG (dag.js).  JupyterLab theme variables, with light fallbacks; the --op-*
   colours come from style.json (dag.js sets them on .op-dag). */
.op-dag {
  position: relative;
  font: 12px/1.4 var(--jp-ui-font-family, system-ui, sans-serif);
  color: var(--jp-ui-font-color1, #1f2937);
}
.op-toolbar {
  display: flex;
  gap: 8px;
  align-items: center;
  margin-bottom: 4px;
}
.op-title {
  font-weight: 600;
}
.op-search {
  flex: 0 1 240px;
  padding: 2px 6px;
  font: inherit;
  color: inherit;
  background: var(--jp-layout-color1, #fff);
  border: 1px solid var(--jp-border-color1, #d1d5db);
  border-radius: 3px;
}
.op-count {
  color: var(--jp-ui-font-color2, #6b7280);
}
.op-older {
  font: inherit;
  cursor: pointer;
}
.op-older:disabled {
  cursor: default;
}
.op-body {
  display: flex;
  flex-wrap: wrap;
  gap: 8px;
  align-items: flex-start;
}
.op-canvas {
  flex: 1 1 420px;
  min-width: 0;
  max-height: 520px;
  overflow: auto;
  border: 1px solid var(--jp-border-color2, #e5e7eb);
  border-radius: 3px;
}
.op-svg {
  display: block;
}

/* nodes */
.op-node {
  cursor: pointer;
}
.op-shape {
  stroke: var(--jp-layout-color1, #fff);
  stroke-width: 1.5;
}
.op-node:hover .op-shape {
  stroke: var(--jp-ui-font-color1, #111827);
}
.op-node.op-open .op-shape {
  stroke: var(--jp-ui-font-color1, #111827);
  stroke-dasharray: 3 2;
}
/* Animations repaint the whole SVG: only small graphs get them (dag.js sets .op-animate). */
.op-animate .op-node.op-open .op-shape {
  animation: op-march 0.8s linear infinite;
}
.op-animate .op-halo {
  animation: op-glow 2s ease-in-out infinite;
}
.op-node.op-error .op-shape {
  stroke: var(--op-error);
  stroke-width: 2;
}
.op-node.op-faded {
  opacity: 0.4;
}
.op-node.op-unknown .op-shape {
  stroke: var(--op-muted);
  stroke-dasharray: 3 2;
}
.op-stale-tag {
  fill: #b45309;
}
.op-node.op-flagged .op-name {
  text-decoration: underline wavy #d97706;
}
.op-node.op-selected .op-shape {
  stroke: var(--op-selected);
  stroke-width: 3;
}
.op-node.op-dim {
  opacity: 0.18;
}
.op-halo {
  fill: var(--op-halo);
  fill-opacity: 0.35;
  stroke: var(--op-halo-stroke);
}
.op-mark {
  font-size: 10px;
  font-weight: bold;
  fill: #fff;
  pointer-events: none;
}
.op-unknown .op-mark {
  fill: #374151;
}
.op-label {
  fill: var(--jp-ui-font-color1, #111827);
  font-size: 12px;
}
.op-name {
  font-weight: 600;
}
.op-meta,
.op-badge {
  fill: var(--jp-ui-font-color2, #6b7280);
}
.op-run-line {
  stroke: var(--op-run);
  stroke-dasharray: 6 3;
}
.op-run-tag {
  fill: var(--op-run);
  font-weight: 600;
}
.op-head-tag {
  fill: var(--op-head);
  font-weight: bold;
}
.op-toggle rect {
  fill: var(--jp-layout-color1, #fff);
  stroke: var(--jp-ui-font-color2, #6b7280);
}
.op-toggle text {
  font-size: 10px;
  fill: var(--jp-ui-font-color1, #111827);
}
.op-toggle:hover rect {
  stroke: var(--jp-brand-color1, #2563eb);
}

/* edges */
.op-edge-pred {
  stroke-width: 2;
}
.op-edge-caller {
  stroke-width: 1;
  stroke-opacity: 0.55;
}

/* hover card and detail panel */
.op-hidden {
  display: none !important;
}
.op-card {
  position: absolute;
  z-index: 10;
  max-width: 320px;
  padding: 6px 8px;
  pointer-events: none;
  background: var(--jp-layout-color0, #fff);
  border: 1px solid var(--jp-border-color1, #d1d5db);
  border-radius: 4px;
  box-shadow: 0 2px 8px rgb(0 0 0 / 15%);
}
.op-card-title {
  font-weight: 600;
}
.op-card-meta,
.op-card-preview {
  color: var(--jp-ui-font-color2, #4b5563);
  overflow-wrap: anywhere;
}
.op-card-flags {
  color: #b45309;
}
.op-detail {
  flex: 1 1 340px;
  min-width: 0;
  max-height: 520px;
  overflow: auto;
  padding: 6px 8px;
  border: 1px solid var(--jp-border-color2, #e5e7eb);
  border-radius: 3px;
}
.op-detail-head {
  display: flex;
  gap: 6px;
  align-items: baseline;
}
.op-detail-close {
  margin-left: auto;
  border: none;
  background: none;
  color: inherit;
  font-size: 16px;
  cursor: pointer;
}
.op-detail-kind {
  padding: 0 4px;
  border-radius: 3px;
  background: var(--jp-layout-color2, #eef2f7);
}
.op-status-error,
.op-detail-error pre,
div.op-detail-error {
  color: var(--op-error);
}
.op-detail-facts {
  display: grid;
  grid-template-columns: max-content 1fr;
  gap: 0 8px;
  margin: 6px 0;
}
.op-detail-facts dt {
  color: var(--jp-ui-font-color2, #6b7280);
}
.op-detail-facts dd {
  margin: 0;
  overflow-wrap: anywhere;
}
.op-detail h4 {
  margin: 8px 0 2px;
  font-size: 12px;
}
.op-detail pre {
  margin: 0;
  padding: 4px 6px;
  max-height: 260px;
  overflow: auto;
  white-space: pre-wrap;
  overflow-wrap: anywhere;
  background: var(--jp-layout-color2, #f8fafc);
  border-radius: 3px;
}
.op-msg {
  margin: 4px 0;
}
.op-msg-role {
  font-weight: 600;
  color: var(--jp-ui-font-color2, #6b7280);
}
.op-msg-gap {
  color: var(--jp-ui-font-color2, #6b7280);
  font-style: italic;
}
.op-more {
  margin-top: 2px;
  font: inherit;
  cursor: pointer;
}
.op-more-note {
  margin-top: 2px;
  color: var(--jp-ui-font-color2, #6b7280);
}

@keyframes op-march {
  to {
    stroke-dashoffset: -10;
  }
}
@keyframes op-glow {
  50% {
    fill-opacity: 0.1;
  }
}
.op-continue {
  margin: 2px 0 4px;
  font: inherit;
  cursor: pointer;
}
.op-branches {
  margin: 0 0 4px;
  color: var(--jp-ui-font-color2, #6b7280);
}
`,""]),r.d(e,{},{A:n})},422(o,e,r){var t=r(601),a=r.n(t),p=r(314),n=(r.n(p))()(a());n.push([o.id,`/* %openprogram diff --widget (diff.js); colours as the static form (compare/render.py) */
.op-diffw {
  font: 12px/1.4 var(--jp-code-font-family, monospace);
  color: var(--jp-ui-font-color1, #111827);
  text-align: left;
}
.op-diffw-title {
  font-weight: 600;
  margin: 4px 0;
}
.op-diffw-why {
  font-weight: 600;
  margin: 6px 0 2px;
}
.op-diffw-finding {
  margin: 1px 0 1px 8px;
}
.op-diffw-bar {
  margin: 6px 0;
  display: flex;
  gap: 10px;
  align-items: center;
}
.op-diffw-bar button {
  font: inherit;
  cursor: pointer;
}
.op-diffw-table {
  border-collapse: collapse;
  width: 100%;
  table-layout: fixed;
}
.op-diffw-table th,
.op-diffw-head {
  text-align: left;
  padding: 3px 6px;
  background: var(--jp-layout-color2, #f3f4f6);
  border: 1px solid var(--jp-border-color2, #e5e7eb);
}
.op-diffw-head {
  cursor: pointer;
}
.op-diffw-body td {
  vertical-align: top;
  padding: 3px 6px;
  border: 1px solid var(--jp-border-color2, #e5e7eb);
}
.op-diffw-section pre {
  margin: 2px 0 6px;
  white-space: pre-wrap;
  word-break: break-word;
}
.op-diffw-note {
  margin-top: 2px;
  font-weight: normal;
}
.op-diffw-deltas,
.op-diffw-state {
  color: var(--jp-ui-font-color2, #6b7280);
}
.op-diffw-changed,
.op-diffw-removed {
  color: #b91c1c;
}
.op-diffw-differs {
  color: #b45309;
}
.op-diffw-added {
  color: #15803d;
}
`,""]),r.d(e,{},{A:n})},646(o,e,r){var t=r(601),a=r.n(t),p=r(314),n=r.n(p),i=r(615),l=r(422),d=n()(a());d.i(i.A),d.i(l.A),d.push([o.id,"/* The session DAG's styles: the same file the live widget (anywidget) loads. */\n/* `%openprogram diff --widget`'s styles (the live widget loads the same file). */\n",""]),r.d(e,{},{A:d})},314(o){o.exports=function(o){var e=[];return e.toString=function(){return this.map(function(e){var r="",t=void 0!==e[5];return e[4]&&(r+="@supports (".concat(e[4],") {")),e[2]&&(r+="@media ".concat(e[2]," {")),t&&(r+="@layer".concat(e[5].length>0?" ".concat(e[5]):""," {")),r+=o(e),t&&(r+="}"),e[2]&&(r+="}"),e[4]&&(r+="}"),r}).join("")},e.i=function(o,r,t,a,p){"string"==typeof o&&(o=[[null,o,void 0]]);var n={};if(t)for(var i=0;i<this.length;i++){var l=this[i][0];null!=l&&(n[l]=!0)}for(var d=0;d<o.length;d++){var s=[].concat(o[d]);t&&n[s[0]]||(void 0!==p&&(void 0===s[5]||(s[1]="@layer".concat(s[5].length>0?" ".concat(s[5]):""," {").concat(s[1],"}")),s[5]=p),r&&(s[2]&&(s[1]="@media ".concat(s[2]," {").concat(s[1],"}")),s[2]=r),a&&(s[4]?(s[1]="@supports (".concat(s[4],") {").concat(s[1],"}"),s[4]=a):s[4]="".concat(a)),e.push(s))}},e}},601(o){o.exports=function(o){return o[1]}},665(o,e,r){r.r(e);var t=r(72),a=r.n(t),p=r(825),n=r.n(p),i=r(659),l=r.n(i),d=r(56),s=r.n(d),f=r(540),c=r.n(f),u=r(113),h=r.n(u),g=r(646),m={};m.styleTagTransform=h(),m.setAttributes=s(),m.insert=l().bind(null,"head"),m.domAPI=n(),m.insertStyleElement=c(),a()(g.A,m);let v=g.A&&g.A.locals?g.A.locals:void 0;r.d(e,{},{default:v})},72(o){var e=[];function r(o){for(var r=-1,t=0;t<e.length;t++)if(e[t].identifier===o){r=t;break}return r}function t(o,t){for(var a={},p=[],n=0;n<o.length;n++){var i=o[n],l=t.base?i[0]+t.base:i[0],d=a[l]||0,s="".concat(l," ").concat(d);a[l]=d+1;var f=r(s),c={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==f)e[f].references++,e[f].updater(c);else{var u=function(o,e){var r=e.domAPI(e);return r.update(o),function(e){e?(e.css!==o.css||e.media!==o.media||e.sourceMap!==o.sourceMap||e.supports!==o.supports||e.layer!==o.layer)&&r.update(o=e):r.remove()}}(c,t);t.byIndex=n,e.splice(n,0,{identifier:s,updater:u,references:1})}p.push(s)}return p}o.exports=function(o,a){var p=t(o=o||[],a=a||{});return function(o){o=o||[];for(var n=0;n<p.length;n++){var i=r(p[n]);e[i].references--}for(var l=t(o,a),d=0;d<p.length;d++){var s=r(p[d]);0===e[s].references&&(e[s].updater(),e.splice(s,1))}p=l}}},659(o){var e={};o.exports=function(o,r){var t=function(o){if(void 0===e[o]){var r=document.querySelector(o);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(o){r=null}e[o]=r}return e[o]}(o);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(r)}},540(o){o.exports=function(o){var e=document.createElement("style");return o.setAttributes(e,o.attributes),o.insert(e,o.options),e}},56(o,e,r){o.exports=function(o){var e=r.nc;e&&o.setAttribute("nonce",e)}},825(o){o.exports=function(o){if("u"<typeof document)return{update:function(){},remove:function(){}};var e=o.insertStyleElement(o);return{update:function(r){var t,a,p;t="",r.supports&&(t+="@supports (".concat(r.supports,") {")),r.media&&(t+="@media ".concat(r.media," {")),(a=void 0!==r.layer)&&(t+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),t+=r.css,a&&(t+="}"),r.media&&(t+="}"),r.supports&&(t+="}"),(p=r.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(p))))," */")),o.styleTagTransform(t,e,o.options)},remove:function(){var o;null===(o=e).parentNode||o.parentNode.removeChild(o)}}}},113(o){o.exports=function(o,e){if(e.styleSheet)e.styleSheet.cssText=o;else{for(;e.firstChild;)e.removeChild(e.firstChild);e.appendChild(document.createTextNode(o))}}}}]);