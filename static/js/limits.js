/*
 * Boxes with a limit in characters (data-max-chars="N"), held as the server counts: characters,
 * a line break as one. A box's maxlength counts UTF-16 units instead, so 2,000 emoji filled a box
 * the server takes 4,000 characters in, and what went past was cut without a word. Here nothing is
 * cut: past the limit the page says so under the box and does not send the form. Without
 * JavaScript the maxlength stays (stricter only for emoji and other characters outside the BMP).
 */
(function () {
  "use strict";

  function characters(text) {
    return Array.from(text.trim()).length;
  }

  document.querySelectorAll("[data-max-chars]").forEach(function (box) {
    var max = Number(box.getAttribute("data-max-chars"));
    if (!max) return;
    box.removeAttribute("maxlength");
    var note = document.createElement("p");
    note.className = "error field-limit";
    note.id = box.id + "-limit";
    note.setAttribute("role", "status");
    note.hidden = true;
    box.insertAdjacentElement("afterend", note);

    function withinLimit() {
      var count = characters(box.value);
      var over = count > max;
      note.hidden = !over;
      note.textContent = over ? "This can be at most " + max + " characters (it has " + count + ")." : "";
      return !over;
    }

    box.addEventListener("input", withinLimit);
    if (box.form) {
      box.form.addEventListener("submit", function (event) {
        if (!withinLimit()) {
          event.preventDefault();
          box.focus();
        }
      });
    }
  });
})();
