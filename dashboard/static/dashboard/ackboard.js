// Ackboard page behaviour: copy buttons. Live-update behaviour is added by the live issue.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  navigator.clipboard?.writeText(button.dataset.copy);
  button.textContent = "copied";
  setTimeout(() => { button.textContent = "copy"; }, 1200);
});
