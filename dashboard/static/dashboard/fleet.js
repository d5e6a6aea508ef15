// The group page's fleet controls: the consumer rows' Retire buttons.
//
// Each consumer row's Retire button carries the consumer's name (data-consumer) and the
// URL its Retire posts to (data-url, written by the server: the consumer's name encoded
// as page URLs encode it). A click opens the one shared Retire dialog
// (#row-dialog-<data-consumer-dialog>), filled from the button:
// - its form's action is the button's URL (ackboard.js points htmx at a shared
//   dialog's form action, as for the pending rows' dialogs);
// - its text names the consumer ([data-fill="consumer"]: textContent, never HTML);
// - the consumer being retired cannot be the one its entries are handed to: that option
//   is disabled, and if no other is left, "make them due for reclaim" is chosen;
// - its disabled .live-hold box is ticked (ackboard.js unticks it when the dialog
//   closes), so live updates hold while it is open.
// No inline script and no eval (the Content-Security-Policy forbids both).
(() => {
  "use strict";

  const fill = (dialog, opener) => {
    const consumer = opener.dataset.consumer ?? "";
    const form = dialog.querySelector("form");
    form.setAttribute("action", opener.dataset.url ?? "");
    const next = form.elements.namedItem("next");
    if (next instanceof HTMLInputElement) {
      next.value = window.location.pathname + window.location.search;
    }
    for (const slot of dialog.querySelectorAll('[data-fill="consumer"]')) {
      slot.textContent = consumer;
    }
    const select = form.querySelector('select[name="to"]');
    const move = form.querySelector('input[name="mode"][value="move"]');
    const reclaim = form.querySelector('input[name="mode"][value="reclaim"]');
    if (select instanceof HTMLSelectElement) {
      let usable = null;
      for (const option of select.options) {
        option.disabled = option.value === consumer || option.value === "";
        if (!option.disabled && usable === null) usable = option;
      }
      if (select.selectedOptions[0]?.disabled && usable) usable.selected = true;
      if (move instanceof HTMLInputElement) {
        move.disabled = usable === null;
        if (move.disabled && reclaim instanceof HTMLInputElement) reclaim.checked = true;
      }
    }
    const title = dialog.dataset.title ?? dialog.getAttribute("aria-label");
    dialog.dataset.title = title;
    dialog.setAttribute("aria-label", `${title} ${consumer}`);
  };

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const opener = target?.closest("[data-consumer-dialog]");
    if (!opener) return;
    const dialog = document.getElementById(`row-dialog-${opener.dataset.consumerDialog}`);
    if (!(dialog instanceof HTMLDialogElement)) return;
    event.preventDefault();
    if (dialog.open) dialog.close();
    fill(dialog, opener);
    const hold = dialog.querySelector(".live-hold");
    if (hold) hold.checked = true;
    dialog.showModal();
  });
})();
