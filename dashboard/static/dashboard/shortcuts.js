// Ackboard keyboard shortcuts: move through a table of entries and press its rows' own
// buttons, without the mouse. Loaded on every page (templates/base.html).
//
// What it owns: a highlighted row (class kb-current, aria-selected, focus) in the pending
// table (group page) or the dead-letter table, the keys below, and the "?" overlay that
// lists them (built here from KEYS, so the list cannot drift from what the keys do).
// What it never does: post anything itself. r, c and d click the highlighted row's own
// Retry, Claim and Dead-letter buttons (ackboard_rows.py writes them), so their confirm
// dialogs (row_actions.js), CSRF header, htmx requests and permissions are the ones a
// mouse click gets; a row without the button (no permission, a dead letter) ignores the key.
//
// Keys never fire while the operator types (an input that takes text, a textarea, a
// select, anything contenteditable), with Ctrl, Alt or Meta held (the browser's own
// shortcuts), or while a dialog is open (it has the keyboard; Escape closes it natively).
// Enter and the arrows act only when the focus is on the page or on a row, never on a
// link or button, whose own Enter is left alone.
//
// The highlight is kept by the row's element id ("pending-<entry id>"): an htmx swap or a
// live push (live.js) replaces the row with a new element of the same id, which is marked
// again; when the row went away (retried elsewhere, dead-lettered) the row now at its
// place is highlighted, so triage goes on down the table. The check runs once a frame at
// most after DOM changes (a MutationObserver), and costs one getElementById.
// No inline script, no eval, no HTML strings: the Content-Security-Policy forbids the
// first two, and text goes in with textContent.
(() => {
  "use strict";

  const ROWS = "table.pending > tbody > tr[id^='pending-'], table.dlq > tbody > tr[id^='dlq-']";
  // The highlighted row's buttons the action keys click (see the header).
  const BUTTONS = {
    r: "button[formaction$='/retry/']",
    c: "[data-row-dialog='claim']",
    d: "[data-row-dialog='dead-letter']",
  };
  // The second key after "g": which top-bar link it follows (only those the user sees).
  const GO = { o: "a.brand", f: "nav.nav a[href$='/failures/']", a: "nav.nav a[href$='/audit/']" };
  const KEYS = [
    [["j", "\u2193"], "Highlight the next row (pending entries, dead letters)"],
    [["k", "\u2191"], "Highlight the previous row"],
    [["Enter", "o"], "Open the highlighted entry"],
    [["x"], "Select the highlighted row for a bulk action (or unselect it)"],
    [["r"], "Retry the highlighted entry"],
    [["c"], "Claim the highlighted entry (asks first)"],
    [["d"], "Dead-letter the highlighted entry (asks first)"],
    [["/"], "Search or filter"],
    [["g", "o"], "Go to the streams overview", "then"],
    [["g", "f"], "Go to Failures", "then"],
    [["g", "a"], "Go to Audit", "then"],
    [["?"], "Show this list"],
    [["Esc"], "Close this list, or clear the highlight"],
  ];
  const TEXT_INPUTS = new Set(["checkbox", "radio", "button", "submit", "reset", "image", "file", "color", "range"]);
  const G_WINDOW_MS = 1500;

  let current = null; // the highlighted row's element id
  let place = 0; // its index, for when the row goes away
  let awaitingGo = 0; // when "g" was pressed

  const typing = (target) => {
    if (!(target instanceof Element)) return false;
    if (target instanceof HTMLInputElement) return !TEXT_INPUTS.has(target.type);
    return Boolean(target.closest("textarea, select, [contenteditable]:not([contenteditable='false'])"));
  };
  const onPageOrRow = (target) =>
    !(target instanceof Element) || target === document.body || target === document.documentElement
    || target.matches(ROWS);

  const rows = () => Array.from(document.querySelectorAll(ROWS));
  const highlighted = () => {
    const row = current ? document.getElementById(current) : null;
    return row?.matches(ROWS) ? row : null;
  };

  const unmark = () => {
    for (const row of document.querySelectorAll("tr.kb-current")) {
      row.classList.remove("kb-current");
      row.removeAttribute("aria-selected");
    }
  };

  const mark = (row, focus) => {
    unmark();
    row.classList.add("kb-current");
    row.setAttribute("aria-selected", "true");
    row.tabIndex = -1;
    current = row.id;
    place = Math.max(0, rows().indexOf(row));
    if (focus) {
      row.focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  };

  const clear = () => {
    unmark();
    current = null;
  };

  const move = (step) => {
    const list = rows();
    if (!list.length) return false;
    const row = highlighted();
    let index = row ? list.indexOf(row) + step : (step > 0 ? 0 : list.length - 1);
    index = Math.min(list.length - 1, Math.max(0, index));
    mark(list[index], true);
    return true;
  };

  // After a swap: the same entry's new row, or the row now at its place.
  const restore = () => {
    if (!current) return;
    const lostFocus = !document.activeElement || document.activeElement === document.body;
    let row = highlighted();
    if (row?.classList.contains("kb-current")) return;
    if (!row) {
      const list = rows();
      if (!list.length) {
        clear();
        return;
      }
      row = list[Math.min(place, list.length - 1)];
    }
    mark(row, lostFocus && !document.querySelector("dialog[open]"));
  };

  const press = (key) => {
    const button = highlighted()?.querySelector(BUTTONS[key]);
    if (!(button instanceof HTMLElement) || button.matches(":disabled")) return false;
    button.click();
    return true;
  };

  const openRow = () => {
    const link = highlighted()?.querySelector("td.id-cell a[href], a[href]");
    if (!(link instanceof HTMLAnchorElement)) return false;
    link.click();
    return true;
  };

  const toggleSelected = () => {
    const box = highlighted()?.querySelector("input[type=checkbox][name=ids]:not(:disabled)");
    if (!(box instanceof HTMLInputElement)) return false;
    box.click(); // a real click: "change" fires, so live.js holds updates while selected
    return true;
  };

  // The page's search box, else its filter form's first text field, else the Find panel.
  const focusSearch = () => {
    const main = document.querySelector("main") ?? document.body;
    let field = main.querySelector("input[type=search]")
      ?? main.querySelector("form.filters[method=get] input[type=text]");
    if (!field) {
      const find = main.querySelector("details.find");
      if (find) find.open = true;
      field = find?.querySelector("input[type=text]") ?? null;
    }
    if (!(field instanceof HTMLInputElement)) return false;
    field.focus();
    field.select();
    return true;
  };

  const go = (key) => {
    const link = document.querySelector(GO[key] ?? "");
    if (!(link instanceof HTMLAnchorElement) || !link.getAttribute("href") || link.getAttribute("href") === "#") return false;
    link.click();
    return true;
  };

  const keyCell = (keys, joiner) => {
    const cell = document.createElement("th");
    cell.scope = "row";
    keys.forEach((key, i) => {
      if (i) cell.append(` ${joiner ?? "or"} `);
      const kbd = document.createElement("kbd");
      kbd.textContent = key;
      cell.append(kbd);
    });
    return cell;
  };

  const buildHelp = () => {
    const dialog = document.createElement("dialog");
    dialog.id = "shortcuts-help";
    dialog.className = "shortcuts-help";
    dialog.setAttribute("aria-labelledby", "shortcuts-help-title");
    const title = document.createElement("h2");
    title.id = "shortcuts-help-title";
    title.textContent = "Keyboard shortcuts";
    const table = document.createElement("table");
    const body = table.createTBody();
    for (const [keys, what, joiner] of KEYS) {
      const row = body.insertRow();
      row.append(keyCell(keys, joiner));
      row.insertCell().textContent = what;
    }
    const note = document.createElement("p");
    note.className = "explain";
    note.textContent = "Not while typing in a field, nor with Ctrl, Alt or Meta held. "
      + "Retry, Claim and Dead-letter press the row's own buttons: those that ask, ask first.";
    const buttons = document.createElement("div");
    buttons.className = "dialog-buttons";
    const close = document.createElement("button");
    close.type = "button";
    close.className = "btn";
    close.dataset.closeDialog = ""; // ackboard.js closes it
    close.textContent = "Close";
    buttons.append(close);
    dialog.append(title, table, note, buttons);
    document.body.append(dialog);
    return dialog;
  };

  const showHelp = () => {
    const dialog = document.getElementById("shortcuts-help") ?? buildHelp();
    if (dialog instanceof HTMLDialogElement && !dialog.open) dialog.showModal();
  };

  // One key (no modifier, not typing, no dialog open): true when it did something.
  const handle = (event) => {
    const { key } = event;
    const afterG = awaitingGo && Date.now() - awaitingGo < G_WINDOW_MS;
    awaitingGo = 0;
    if (afterG && key in GO) return go(key); // any other key after "g" is itself
    switch (key) {
      case "j": return move(1);
      case "k": return move(-1);
      case "ArrowDown": return Boolean(highlighted()) && onPageOrRow(event.target) && move(1);
      case "ArrowUp": return Boolean(highlighted()) && onPageOrRow(event.target) && move(-1);
      case "Enter": return onPageOrRow(event.target) && openRow();
      case "o": return openRow();
      case "x": return toggleSelected();
      case "r": case "c": case "d": return press(key);
      case "/": return focusSearch();
      case "?": showHelp(); return true;
      case "g": awaitingGo = Date.now(); return true;
      case "Escape":
        if (!current) return false;
        clear();
        return true;
      default: return false;
    }
  };

  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.isComposing) return;
    if (event.ctrlKey || event.altKey || event.metaKey) return;
    if (typing(event.target)) return;
    const open = document.querySelector("dialog[open]");
    if (open) {
      if (event.key === "?" && open.id === "shortcuts-help") open.close();
      return;
    }
    if (handle(event)) event.preventDefault();
  });

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (target?.closest("[data-shortcuts-open]")) {
      showHelp();
      return;
    }
    // Once the keys are in use, a click on a row moves the highlight there (so the keys go
    // on from where the pointer was); a mouse-only user never sees a highlight.
    const row = current ? target?.closest(ROWS) : null;
    if (row) mark(row, false);
  });

  for (const opener of document.querySelectorAll("[data-shortcuts-open]")) opener.hidden = false;

  let queued = false;
  new MutationObserver(() => {
    if (queued || !current) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; restore(); });
  }).observe(document.body, { childList: true, subtree: true });
})();
