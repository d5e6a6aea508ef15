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
// - dialog#row-dialog-* a shared dialog (one for every row: row_actions.js, fleet.js fill
//                       it and set its form's action for the row it was opened from):
//                       htmx posts to that action, not to the hx-post it read at load
//                       (the URLs' common prefix). In one place, for every page.
// - [data-clear="sel"]  empties the nearest ancestor matching sel (the bulk result's Cancel).
// - #messages .flash    each result message in the toast (ackboard.css) gets a Dismiss
//                       button ([data-dismiss]), whoever put it there: the page's own
//                       flash, an action's out-of-band answer, a 503 banner. It stays until
//                       dismissed or replaced by the next answer (no timer: a message read
//                       slowly is not lost).
// - .bulk-result        a dry run's card (bulk, Trim, Reset position), swapped in under its
//                       form: scrolled into view when it lands outside it, so what it
//                       counts and its Confirm are where the operator is looking.
// - [data-swap-4xx]     requests from inside it show 4xx answers: a refusal that says why
//                       (the global htmx-config in base.html swaps no 4xx).
// - [data-bulk-scope]   the bulk bar posts the pending table's current snapshot and filter,
//                       which live updates and the filter form change after the page loaded.
// - details.row-menu    a table row's actions menu: one is open at a time; a click outside
//                       it, Escape, or a click on one of its buttons closes it. live.js
//                       holds a push into a region while a menu in it is open.
// - td.clip             a table cell cut to one line: a click (not on a link, button or
//                       disclosure in it) shows it whole, another cuts it again.
// - [data-since]        a time since an instant (ms since the epoch): written here as
//                       "[data-prefix ]3 min 20 s[ ago]" (with data-ago), the same two units
//                       as the server's human_ms, and kept current every second and after
//                       every swap. The server's HTML holds only the instant (ackboard.py,
//                       since_span), so it does not change from one request to the next.
//                       The clock is the server's: <meta name="ackboard-now"> holds its time
//                       (s) when it wrote the page, and ackboardNow() is this browser's clock
//                       moved by the difference. That estimate errs early by the page's
//                       transit time, so an idle time derived from it is never more than
//                       the true one (row_actions.js posts it as a claim's guard).
(() => {
  "use strict";

  // A "change" on the document makes live.js re-check whether anything holds updates.
  const recheckLive = () => document.dispatchEvent(new Event("change"));

  const closeMenus = (except) => {
    for (const menu of document.querySelectorAll("details.row-menu[open]")) {
      if (menu !== except) menu.open = false;
    }
  };
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeMenus(null);
  });

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (!target) return;

    const menu = target.closest("details.row-menu");
    closeMenus(menu);
    // After the button's own action (a submit, a dialog) has started.
    if (menu && target.closest("button")) setTimeout(() => { menu.open = false; }, 0);

    const clip = target.closest("td.clip");
    if (clip && !target.closest("a, button, summary, input, details")
        && !window.getSelection()?.toString()) {
      clip.classList.toggle("clip-open");
      return;
    }

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
    if (clearer) {
      clearer.closest(clearer.dataset.clear)?.replaceChildren();
      return;
    }

    const dismiss = target.closest("#messages [data-dismiss]");
    if (dismiss) dismiss.closest(".flash")?.remove();
  });

  const addDismissButtons = () => {
    for (const flash of document.querySelectorAll("#messages .flash")) {
      if (flash.querySelector(":scope > [data-dismiss]")) continue;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "dismiss";
      button.dataset.dismiss = "";
      button.setAttribute("aria-label", "Dismiss message");
      button.textContent = "\u00d7";
      flash.append(button);
    }
  };

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

  document.addEventListener("htmx:configRequest", (event) => {
    const elt = event.target instanceof Element ? event.target : null;
    const form = elt?.closest('dialog[id^="row-dialog-"] form');
    if (form) event.detail.path = form.getAttribute("action");
  });

  // htmx:afterSettle fires on the swapped-in element itself (also for an outerHTML swap).
  document.addEventListener("htmx:afterSettle", (event) => {
    const card = event.target instanceof Element ? event.target : null;
    if (!card?.isConnected || !card.matches(".bulk-result") || !card.childElementCount) return;
    card.scrollIntoView({ block: "nearest" });
  });

  document.addEventListener("htmx:beforeSwap", (event) => {
    const status = event.detail.xhr.status;
    if (status < 400 || status >= 500) return;
    if (!(event.target instanceof Element) || !event.target.closest("[data-swap-4xx]")) return;
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  });

  const stamp = document.querySelector('meta[name="ackboard-now"]');
  const skew = stamp ? Number(stamp.getAttribute("content")) * 1000 - Date.now() : 0;
  window.ackboardNow = () => Date.now() + (Number.isFinite(skew) ? skew : 0);

  const UNITS = [["d", 86_400_000], ["h", 3_600_000], ["min", 60_000], ["s", 1_000]];
  const human = (ms) => {
    if (ms < 1_000) return `${ms} ms`;
    for (let i = 0; i < UNITS.length; i += 1) {
      const [unit, size] = UNITS[i];
      if (ms < size) continue;
      let text = `${Math.floor(ms / size)} ${unit}`;
      const next = UNITS[i + 1];
      const small = next ? Math.floor((ms % size) / next[1]) : 0;
      if (small) text += ` ${small} ${next[0]}`;
      return text;
    }
    return `${ms} ms`;
  };

  const writeTimes = () => {
    const now = window.ackboardNow();
    for (const el of document.querySelectorAll("[data-since]")) {
      const at = Number(el.dataset.since);
      if (!Number.isFinite(at)) continue;
      const age = Math.max(0, Math.floor(now - at));
      const prefix = el.dataset.prefix ? `${el.dataset.prefix} ` : "";
      const text = `${prefix}${human(age)}${"ago" in el.dataset ? " ago" : ""}`;
      if (el.textContent !== text) el.textContent = text;
      const utc = new Date(at).toISOString().replace("T", " ").replace("Z", " UTC");
      el.title = `${utc} · ${age.toLocaleString("en-US")} ms ago`;
    }
  };
  let queued = false;
  const queueTimes = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; writeTimes(); addDismissButtons(); });
  };
  writeTimes();
  addDismissButtons();
  setInterval(writeTimes, 1_000);
  // Swapped-in rows (htmx requests, live pushes) and messages: done before they are painted.
  new MutationObserver(queueTimes).observe(document.body, { childList: true, subtree: true });

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
