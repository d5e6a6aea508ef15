// The group page's row actions: one shared confirm dialog per action, filled from the row.
//
// Each pending row carries what its actions need as data- attributes (data-consumer,
// data-delivered: when it was last delivered, ms since the epoch, rounded up to the
// second; data-deliveries; the entry id is in the row's id, "pending-<id>"), and
// its Claim / Dead-letter / Acknowledge buttons (in the row's actions menu,
// details.row-menu, which ackboard.js closes after a click) say which dialog they want
// (data-row-dialog="claim"). Without JavaScript those buttons submit the empty GET form
// #row-open to the entry's page; here a click opens #row-dialog-<action> instead:
// - the dialog's form posts to <action prefix><id>/<action>/ (its hx-post is only the
//   prefix; ackboard.js points htmx at the form's action), with the consumer, idle
//   time (now, by the server's clock: ackboard.js's ackboardNow(), which never runs
//   ahead of it) and deliveries the operator saw, so a claim still refuses an entry a
//   worker touched since ("changed since you looked");
// - its text names the entry ([data-fill]: textContent, never HTML), and its aria-label
//   ends with the entry id;
// - its disabled .live-hold box is ticked (ackboard.js unticks it when the dialog
//   closes), so live updates hold while it is open.
// No inline script and no eval (the Content-Security-Policy forbids both). Retry needs no
// dialog: it is a submit button of the shared #row-retry form, which htmx posts with the
// button's formaction, name and value (it honours them for a button outside its form only
// when the button says type="submit": ackboard_rows.py writes it).
(() => {
  "use strict";

  const ROW_PREFIX = "pending-";

  const plural = (n) => `${n} deliver${n === "1" ? "y" : "ies"}`;

  const fill = (dialog, row, action) => {
    const id = row.id.slice(ROW_PREFIX.length);
    const data = row.dataset;
    const form = dialog.querySelector("form");
    const prefix = form.getAttribute("hx-post");
    form.setAttribute("action", `${prefix}${id}/${action}/`);
    const set = (name, value) => {
      const input = form.elements.namedItem(name);
      if (input instanceof HTMLInputElement) input.value = value;
    };
    set("seen_consumer", data.consumer ?? "");
    const delivered = Number(data.delivered);
    const idle = Math.floor((window.ackboardNow?.() ?? Date.now()) - delivered);
    set("seen_idle_ms", Number.isFinite(idle) ? String(Math.max(0, idle)) : "");
    set("seen_deliveries", data.deliveries ?? "");
    set("next", window.location.pathname + window.location.search);
    const text = { id, consumer: data.consumer ?? "", deliveries: plural(data.deliveries ?? "0") };
    for (const slot of dialog.querySelectorAll("[data-fill]")) {
      slot.textContent = text[slot.dataset.fill] ?? "";
    }
    dialog.dataset.entry = id;
    const title = dialog.dataset.title ?? dialog.getAttribute("aria-label");
    dialog.dataset.title = title;
    dialog.setAttribute("aria-label", `${title} ${id}`);
  };

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const opener = target?.closest("[data-row-dialog]");
    if (!opener) return;
    const row = opener.closest(`tr[id^="${ROW_PREFIX}"]`);
    const action = opener.dataset.rowDialog;
    const dialog = document.getElementById(`row-dialog-${action}`);
    if (!row || !(dialog instanceof HTMLDialogElement)) return; // no dialog: the entry page
    event.preventDefault();
    if (dialog.open) dialog.close();
    fill(dialog, row, action);
    const hold = dialog.querySelector(".live-hold");
    if (hold) hold.checked = true;
    dialog.showModal();
  });

})();
