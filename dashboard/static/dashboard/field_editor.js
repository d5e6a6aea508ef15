/* The field editor of Edit & replay (templates/dashboard/dlq_edit.html) and of Produce
 * (templates/dashboard/produce.html).
 *
 * One fieldset per field: a JSON value ("json" mode) is validated as it is typed and
 * pretty-printed when the textarea loses focus; a new field whose value is a JSON object
 * or array becomes a JSON field. Fields are added from the <template> and removed with
 * their button. Names starting with the reserved prefix (ackboard.) are refused. The
 * form is not sent while a field is wrong; the server checks everything again (a clear
 * 400 naming the field). Produce's "Produce…" button (data-confirm-dialog) checks the
 * fields the same way, then opens its confirm dialog ({% confirmdialog %}), which names
 * them; the dialog's form posts them with its own (hx-include) and closes once the answer
 * is in (ackboard.js), and the editor's form never posts by itself. Plain JS,
 * no dependency, no inline code (the CSP forbids it).
 */
(function () {
  "use strict";

  function parseJson(text) {
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch (err) {
      return { ok: false, error: err.message };
    }
  }

  function looksContainer(text) {
    var t = text.trim();
    return t.charAt(0) === "{" || t.charAt(0) === "[";
  }

  function setMode(fieldset, mode) {
    fieldset.dataset.mode = mode;
    var input = fieldset.querySelector('input[name="field_mode"]');
    if (input) input.value = mode;
  }

  function check(fieldset, prefix) {
    var status = fieldset.querySelector(".field-status");
    var name = fieldset.querySelector(".field-name");
    var value = fieldset.querySelector(".field-value");
    var problem = "";
    if (name && !name.readOnly) {
      var n = name.value.trim();
      if (!n) problem = "This field needs a name.";
      else if (n.indexOf(prefix) === 0) problem = "Names starting with " + prefix + " are reserved.";
    }
    if (!problem && value) {
      var isNew = fieldset.querySelector('input[name="field_orig"]').value === "";
      if (isNew && fieldset.dataset.mode === "text" && looksContainer(value.value) && parseJson(value.value).ok) {
        setMode(fieldset, "json");
      }
      if (fieldset.dataset.mode === "json") {
        var parsed = parseJson(value.value);
        if (!parsed.ok) problem = "Not valid JSON: " + parsed.error;
      }
    }
    if (status) {
      status.textContent = problem || (fieldset.dataset.mode === "json" ? "JSON ✓" : "");
      status.classList.toggle("bad", !!problem);
    }
    fieldset.classList.toggle("invalid", !!problem);
    return problem;
  }

  function pretty(fieldset) {
    var value = fieldset.querySelector(".field-value");
    if (!value || fieldset.dataset.mode !== "json") return;
    var parsed = parseJson(value.value);
    if (parsed.ok) value.value = JSON.stringify(parsed.value, null, 2);
  }

  function wire(fieldset, prefix) {
    var remove = fieldset.querySelector(".field-remove");
    if (remove) {
      remove.addEventListener("click", function () {
        fieldset.remove();
      });
    }
    fieldset.addEventListener("input", function () {
      check(fieldset, prefix);
    });
    var value = fieldset.querySelector(".field-value");
    if (value) {
      value.addEventListener("blur", function () {
        if (!check(fieldset, prefix)) pretty(fieldset);
      });
    }
    check(fieldset, prefix);
  }

  function init() {
    var form = document.getElementById("field-editor");
    if (!form) return;
    var prefix = form.dataset.reservedPrefix || "ackboard.";
    var rows = form.querySelector(".editor-rows");
    var template = document.getElementById("editor-field-template");
    var error = document.getElementById("editor-error");
    form.querySelectorAll(".editor-rows .editor-field").forEach(function (f) {
      wire(f, prefix);
    });
    // A shown error goes once every field is right again.
    form.addEventListener("input", function () {
      if (error.hidden) return;
      if (!form.querySelector(".editor-rows .editor-field.invalid")) error.hidden = true;
    });
    var add = document.getElementById("field-add");
    if (add && template && rows) {
      add.addEventListener("click", function () {
        var fieldset = template.content.firstElementChild.cloneNode(true);
        rows.appendChild(fieldset);
        wire(fieldset, prefix);
        fieldset.querySelector(".field-name").focus();
      });
    }
    function problemsShown() {
      var problems = [];
      form.querySelectorAll(".editor-rows .editor-field").forEach(function (f, i) {
        var p = check(f, prefix);
        if (p) problems.push("Field " + (i + 1) + ": " + p);
      });
      if (!form.querySelector(".editor-rows .editor-field")) problems.push("Keep at least one field.");
      error.textContent = problems.join(" ");
      error.hidden = !problems.length;
      return problems.length > 0;
    }
    var opener = form.querySelector("[data-confirm-dialog]");
    form.addEventListener("submit", function (event) {
      if (problemsShown()) event.preventDefault();
      else if (opener) {
        // Produce's form posts only through its confirm dialog (Enter in a field).
        event.preventDefault();
        opener.click();
      }
    });
    if (opener) wireConfirm(form, opener, problemsShown);
  }

  function wireConfirm(form, opener, problemsShown) {
    var dialog = document.getElementById(opener.dataset.confirmDialog);
    var summary = dialog.querySelector("#produce-summary");
    opener.addEventListener("click", function () {
      if (problemsShown()) return;
      var names = [];
      form.querySelectorAll(".editor-rows .field-name").forEach(function (n) {
        names.push(n.value.trim());
      });
      var shown = names.slice(0, 10).join(", ") + (names.length > 10 ? ", …" : "");
      summary.textContent = names.length + (names.length === 1 ? " field: " : " fields: ") + shown + ".";
      dialog.showModal();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
