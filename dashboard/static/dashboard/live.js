// Ackboard live updates: swap pushed partials by element id, pause, show the state.
//
// The page's element with ws-connect (htmx ws extension) receives HTML whose top-level
// elements carry the ids of the regions to replace. This file takes over the swap so it
// can hold updates back:
// - while rows are selected for a bulk action (any checked input[name=ids]), so the
//   table does not change under the operator's pointer;
// - while the tab is hidden;
// - for a region the page marks data-live="off" (a filtered or deeper page of a table:
//   the server only pushes the default first page, which must not overwrite it);
// - for a region with an open row actions menu (details.row-menu[open]): the push would
//   close it under the operator's pointer; it applies when the menu closes;
// - for a region an htmx request of the page is about to replace (a filter, a pager):
//   a push swapped in meanwhile would detach the request's target, and its newer answer
//   (the filtered table) would land in a detached element and never show.
// Held updates are kept per region id (only the newest matters) and applied once on
// resume. #live-indicator shows the state.
//
// Reconnecting: the ws extension retries after abnormal closures (1006, 1011-1013) only.
// A 44xx close is the server saying "stop" (logged out, no permission, not a live page).
// Any other close from the server (daphne ends every socket after --websocket_timeout,
// a day by default, with 1000; a restarting server may say 1001) is retried here, with
// the same jittered backoff, so a tab stays live for as long as it is open.
(() => {
  "use strict";
  const held = new Map();
  let pushes = 0;
  // Targets of htmx requests in flight (see the header).
  const busy = new Set();
  const awaited = (region) => {
    for (const target of busy) {
      if (target === region || region.contains(target) || target.contains(region)) return true;
    }
    return false;
  };
  const state = { socket: "none", closeCode: 0, selecting: false, hidden: document.hidden };
  // Why the server closed the socket for good (see dashboard/live/session.py, consumers.py).
  const refused = {
    4401: "offline · log in again",
    4403: "offline · no permission",
    4404: "offline · not a live page",
  };

  const paused = () => state.selecting || state.hidden;

  function showState() {
    const indicator = document.getElementById("live-indicator");
    if (!indicator) return;
    if (state.socket === "none") {
      indicator.hidden = true;
      return;
    }
    indicator.hidden = false;
    let name = "live";
    let label = "live";
    if (state.socket !== "open") {
      name = "offline";
      label = refused[state.closeCode]
        || (state.socket === "closed" ? "offline · reconnecting" : "connecting");
    } else if (state.selecting) {
      name = "paused";
      label = "paused · rows selected";
    } else if (state.hidden) {
      name = "paused";
      label = "paused · tab hidden";
    }
    indicator.dataset.state = name;
    indicator.textContent = label;
    indicator.title = name === "paused"
      ? "Live updates are paused; they resume when you clear the selection"
      : "Live updates";
  }

  function swapIn(id, html) {
    const current = document.getElementById(id);
    if (!current || current.dataset.live === "off") return;
    if (awaited(current) || current.querySelector("details.row-menu[open]")) {
      held.set(id, html); // dropped if the request's answer replaces the region
      return;
    }
    htmx.swap(current, html, { swapStyle: "outerHTML", swapDelay: 0, settleDelay: 0 });
  }

  function resume() {
    if (paused()) return;
    const pending = Array.from(held.entries());
    held.clear();
    for (const [id, html] of pending) swapIn(id, html);
  }

  function recheck() {
    const selecting = document.querySelector('input[name="ids"]:checked') !== null;
    const hidden = document.hidden;
    const changed = selecting !== state.selecting || hidden !== state.hidden;
    state.selecting = selecting;
    state.hidden = hidden;
    if (changed) {
      resume();
      showState();
    }
  }

  document.addEventListener("htmx:wsBeforeMessage", (event) => {
    event.preventDefault();
    const template = document.createElement("template");
    template.innerHTML = event.detail.message;
    for (const element of Array.from(template.content.children)) {
      if (!element.id) continue;
      if (paused()) held.set(element.id, element.outerHTML);
      else swapIn(element.id, element.outerHTML);
    }
    // Pushes applied so far: every socket gets one on connect (its surface's last or a
    // fresh rendering), so a count of 1 says the page has caught up with its socket.
    pushes += 1;
    document.documentElement.dataset.livePushes = String(pushes);
    document.dispatchEvent(new CustomEvent("ackboard:live-applied"));
  });

  document.addEventListener("htmx:beforeRequest", (event) => {
    if (event.detail.target) busy.add(event.detail.target);
  });
  // After the answer was swapped (or the request failed): what is still held applies.
  document.addEventListener("htmx:afterRequest", (event) => {
    busy.delete(event.detail.target);
    resume();
  });

  // A region replaced by an ordinary htmx request (an action's response) is newer than
  // anything held for it.
  document.addEventListener("htmx:afterSwap", (event) => {
    const target = event.detail.target;
    if (!target || !target.isConnected) return;
    for (const id of Array.from(held.keys())) {
      if (target.id === id || target.querySelector(`#${CSS.escape(id)}`)) held.delete(id);
    }
    recheck();
  });

  const retriedByExtension = [1006, 1011, 1012, 1013];
  let leaving = false;
  let retries = 0;
  window.addEventListener("pagehide", () => { leaving = true; });
  window.addEventListener("pageshow", () => { leaving = false; });
  document.addEventListener("htmx:wsOpen", () => { retries = 0; });
  document.addEventListener("htmx:wsClose", (event) => {
    const code = event.detail?.event?.code || 0;
    const wrapper = event.detail?.socketWrapper;
    const source = event.target;
    if (refused[code] || retriedByExtension.includes(code) || !wrapper || leaving) return;
    if (!source.isConnected) return; // the page removed the region: nothing to follow
    const delay = Math.min(30000, 1000 * 2 ** retries) * (0.5 + Math.random() / 2);
    retries += 1;
    setTimeout(() => {
      if (!leaving && source.isConnected) wrapper.reconnect();
    }, delay);
  });

  const setSocket = (value) => (event) => {
    state.socket = value;
    state.closeCode = value === "closed" ? event.detail?.event?.code || 0 : 0;
    showState();
  };
  document.addEventListener("htmx:wsConnecting", setSocket("connecting"));
  document.addEventListener("htmx:wsOpen", setSocket("open"));
  document.addEventListener("htmx:wsClose", setSocket("closed"));
  document.addEventListener("htmx:wsError", setSocket("closed"));
  document.addEventListener("change", recheck);
  // "toggle" does not bubble: a row menu that closed lets what it held apply.
  document.addEventListener("toggle", (event) => {
    const menu = event.target;
    if (menu instanceof HTMLDetailsElement && menu.matches(".row-menu") && !menu.open) resume();
  }, true);
  // "Select all" may tick boxes from script, which fires no change event.
  document.addEventListener("click", () => setTimeout(recheck, 0));
  document.addEventListener("visibilitychange", recheck);
  document.addEventListener("DOMContentLoaded", () => {
    if (state.socket === "none" && document.querySelector("[ws-connect]")) {
      state.socket = "connecting";
    }
    recheck();
    showState();
  });
})();
