// The staff conversation page, live: a WebSocket rings when the ticket's timeline changes;
// what is new is fetched over HTTP (rendered by the server from the ledger) and appended.
// Nothing else on the page is re-rendered, so a reply being typed, an open trace and the
// keyboard focus are never disturbed.
(function () {
  "use strict";
  var root = document.getElementById("staff-ticket");
  if (!root) return;
  var timeline = document.getElementById("timeline");
  var live = document.getElementById("live-status");
  var statusBadge = document.getElementById("ticket-status");
  var assigneeText = document.getElementById("ticket-assignee");
  var side = document.getElementById("customer-side");
  var after = parseInt(root.dataset.after, 10) || 0;
  var delay = 500;
  var fetching = false;
  var again = false;

  function apply(data) {
    if (data.html && data.last_seq > after) {
      var holder = document.createElement("template");
      holder.innerHTML = data.html;  // rendered and escaped by Django
      Array.prototype.forEach.call(holder.content.querySelectorAll("li[data-seq]"), function (li) {
        if (parseInt(li.dataset.seq, 10) > after) timeline.appendChild(li);
      });
    }
    after = Math.max(after, data.last_seq || 0);
    // Resolve and Close say what the page has shown: a customer message it has not is a conflict.
    document.querySelectorAll("input[data-seen]").forEach(function (input) { input.value = String(after); });
    if (typeof data.side_html === "string") side.innerHTML = data.side_html;  // no inputs in it: nothing to lose
    statusBadge.textContent = data.status_text;
    statusBadge.className = "badge " + data.status;
    statusBadge.dataset.status = data.status;
    assigneeText.textContent = data.assignee || "nobody";
    document.querySelectorAll("form[data-needs]").forEach(function (form) {
      var allowed = data.allowed && data.allowed[form.dataset.needs];
      if (form.dataset.needs === "write") {
        form.querySelectorAll("button").forEach(function (b) { b.disabled = !allowed; });
      } else {
        form.hidden = !allowed;
      }
    });
  }

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(root.dataset.timelineUrl + "?after=" + after, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(apply)
      .catch(function () { live.textContent = "Could not load what is new; retrying…"; })
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/staff/tickets/" + root.dataset.ticketId + "/");
    socket.onopen = function () { delay = 500; live.textContent = "Live"; refresh(); };
    socket.onmessage = function () { refresh(); };
    socket.onclose = function (event) {
      if (event.code === 4403) { live.textContent = "Not allowed: sign in again."; return; }
      live.textContent = "Reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }

  // A form sent once: a second click while it is on its way sends nothing more (the server
  // would store it once anyway, under the same client message id).
  document.querySelectorAll("form").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (form.dataset.sending) { event.preventDefault(); return; }
      form.dataset.sending = "1";
    });
  });
  connect();
})();
