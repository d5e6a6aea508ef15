// Ackboard page behaviour. Live updates are live.js.
//
// The Content-Security-Policy forbids inline script and eval, and htmx runs with
// allowEval off, so the templates carry no onclick=, hx-on or js: values: they mark
// elements with data- attributes and everything is wired here, once, by event
// delegation on the document (so rows swapped in later need no setup):
// - [data-copy]         copy button: copies the attribute's value.
// - [data-open-dialog]  opens the <dialog> right after the button. Its hidden, disabled
//                       .live-hold box (name=ids) is ticked while it is open: live.js
//                       holds pushed updates while any such box is ticked, so a re-rendered
//                       row cannot close the dialog under the operator.
// - [data-close-dialog] Cancel: closes its dialog. Any dialog that closes (Cancel, Escape,
//                       or its form's request done) unticks its box and has live.js re-check.
// - [data-clear="sel"]  empties the nearest ancestor matching sel (the bulk result's Cancel).
// - [data-swap-4xx]     requests from inside it show 4xx answers: a refusal that says why
//                       (the global htmx-config in base.html swaps no 4xx).
// - [data-bulk-scope]   the bulk bar posts the pending table's current snapshot and filter,
//                       which live updates and the filter form change after the page loaded.
(() => {
  "use strict";

  // A "change" on the document makes live.js re-check whether anything holds updates.
  const recheckLive = () => document.dispatchEvent(new Event("change"));

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (!target) return;

    const copy = target.closest("[data-copy]");
    if (copy) {
      navigator.clipboard?.writeText(copy.dataset.copy);
      copy.dataset.label ??= copy.textContent; // "copy", "copy name", "copy id"
      copy.textContent = "copied";
      setTimeout(() => { copy.textContent = copy.dataset.label; }, 1200);
      return;
    }

    const opener = target.closest("[data-open-dialog]");
    if (opener) {
      const dialog = opener.nextElementSibling;
      if (!(dialog instanceof HTMLDialogElement)) return;
      const hold = dialog.querySelector(".live-hold");
      if (hold) hold.checked = true;
      dialog.showModal();
      return;
    }

    const closer = target.closest("[data-close-dialog]");
    if (closer) {
      closer.closest("dialog")?.close();
      return;
    }

    const clearer = target.closest("[data-clear]");
    if (clearer) clearer.closest(clearer.dataset.clear)?.replaceChildren();
  });

  // "close" does not bubble: listen in the capture phase.
  document.addEventListener("close", (event) => {
    if (!(event.target instanceof HTMLDialogElement)) return;
    const hold = event.target.querySelector(".live-hold");
    if (hold) hold.checked = false;
    recheckLive();
  }, true);

  // A dialog's form closes it once its request is done, whatever the answer (the answer's
  // message shows in #messages). A form whose row the answer replaced or removed is no
  // longer in the document, so this does not reach it: its dialog went with the row, and
  // the answer's HX-Trigger-After-Swap: change has live.js re-check.
  document.addEventListener("htmx:afterRequest", (event) => {
    const dialog = event.target instanceof Element ? event.target.closest("dialog") : null;
    if (dialog?.open) dialog.close();
  });

  document.addEventListener("htmx:beforeSwap", (event) => {
    const status = event.detail.xhr.status;
    if (status < 400 || status >= 500) return;
    if (!(event.target instanceof Element) || !event.target.closest("[data-swap-4xx]")) return;
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  });

  document.addEventListener("htmx:configRequest", (event) => {
    if (!(event.target instanceof Element) || !event.target.closest("[data-bulk-scope]")) return;
    const params = event.detail.parameters;
    // Without these elements the form's own page-load values are posted.
    const snapshot = document.getElementById("pending-table")?.dataset.snapshotId;
    if (snapshot) params.snapshot_id = snapshot;
    const filters = document.querySelector("form.filters[method=get]");
    const consumer = filters?.querySelector("[name=consumer]");
    if (consumer) params.consumer = consumer.value;
    const minIdle = filters?.querySelector("[name=min_idle]");
    if (minIdle) params.min_idle_ms = String((Number(minIdle.value) || 0) * 1000 || "");
  });
})();
