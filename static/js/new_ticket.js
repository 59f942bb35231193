/*
 * The new-ticket form keeps what was sent until a ticket page opens: a session that ended meanwhile
 * sends the customer to sign in, and the POST (with their words) is dropped on the way. Back on this
 * form after signing in, the words are in the boxes again, ready to send. The ticket's page takes
 * them out once it opens (chat.js): the ticket was made.
 */
(function () {
  "use strict";

  var KEY = "new-ticket-sent";
  var form = document.querySelector("form.new-ticket");
  var subject = document.getElementById("id_subject");
  var body = document.getElementById("id_body");
  if (!form || !subject || !body) return;

  var kept = null;
  try {
    kept = JSON.parse(window.sessionStorage.getItem(KEY) || "null");
    window.sessionStorage.removeItem(KEY);
  } catch (e) {
    kept = null;
  }
  if (kept && typeof kept.body === "string" && kept.body && !body.value.trim()) {
    body.value = kept.body;
    if (!subject.value && typeof kept.subject === "string") subject.value = kept.subject;
    var note = document.createElement("p");
    note.className = "muted";
    note.id = "new-ticket-kept";
    note.setAttribute("role", "status");
    // The chat of a closed ticket sends its unsent message here with words of its own (chat.js).
    note.textContent =
      typeof kept.note === "string" && kept.note
        ? kept.note
        : "What you wrote before you were signed out is back: press Send to send it.";
    form.insertAdjacentElement("beforebegin", note);
  }

  form.addEventListener("submit", function (event) {
    if (event.defaultPrevented) return; // held (too long): nothing was sent
    try {
      window.sessionStorage.setItem(KEY, JSON.stringify({ subject: subject.value, body: body.value }));
    } catch (e) {
      /* storage off: the form still goes */
    }
  });
})();
