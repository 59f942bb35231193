// The staff conversation page, live: a WebSocket rings when the ticket's timeline changes;
// what is new is fetched over HTTP (rendered by the server from the ledger) and appended.
// Nothing else on the page is re-rendered, so a reply being typed, an open trace and the
// keyboard focus are never disturbed. The page catches up when the server says the socket is
// listening ("ready", sent once it is in the ticket's group: a change committed before that is in
// the catch-up, one after it rings), not when the socket opens; a read that fails is tried again.
// A socket gone silent without closing is given up and opened again (static/js/heartbeat.js).
(function () {
  "use strict";
  var root = document.getElementById("staff-ticket");
  if (!root) return;
  var timeline = document.getElementById("timeline");
  var live = document.getElementById("live-status");
  var statusBadge = document.getElementById("ticket-status");
  var assigneeText = document.getElementById("ticket-assignee");
  var side = document.getElementById("customer-side");
  var assigneeBox = document.getElementById("assignee");
  // The box names whom the page shows assigned until the person picks someone: pressing Assign
  // beside "assigned to li" with the box still naming whom the page was opened with would take the
  // ticket from li without anyone choosing that.
  var assigneePicked = false;
  if (assigneeBox) assigneeBox.addEventListener("change", function () { assigneePicked = true; });
  var after = parseInt(root.dataset.after, 10) || 0;
  var delay = 500;
  var fetching = false;
  var again = false;
  var listening = false; // the socket is in the ticket's group: a change rings it
  var denied = false;
  var retryDelay = 1000;
  var retryTimer = null;
  var socket = null; // the one the page listens to: one given up may still bring a frame, or its close

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
    // Who has the ticket and who is assigned, as the page now shows them: a hand-back, reply or
    // assignment sent after a colleague's take-over was shown here is what the person chose, not a
    // conflict. Not sent by an older server: the values the page was rendered with stay.
    if (data.holder !== undefined) {
      document.querySelectorAll("input[name=holder]").forEach(function (input) { input.value = String(data.holder); });
    }
    if (data.assigned !== undefined) {
      document.querySelectorAll("input[name=assigned]").forEach(function (input) { input.value = String(data.assigned); });
    }
    if (assigneeBox && !assigneePicked && typeof data.assignee === "string") {
      var shown = Array.prototype.find.call(assigneeBox.options, function (o) { return o.value === data.assignee; });
      if (shown) assigneeBox.value = data.assignee;
    }
    document.querySelectorAll("form[data-needs]").forEach(function (form) {
      var allowed = data.allowed && data.allowed[form.dataset.needs];
      if (form.dataset.needs === "write") {
        form.querySelectorAll("button").forEach(function (b) { b.disabled = !allowed; });
      } else {
        form.hidden = !allowed;
      }
    });
  }

  // A read that failed (a server error, a dropped connection) is made again, with a growing pause:
  // the ring it answered will not come again, so waiting for the next one could be waiting for ever.
  function retryLater() {
    if (denied || retryTimer !== null) return;
    retryTimer = setTimeout(function () { retryTimer = null; refresh(); }, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 10000);
  }

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(root.dataset.timelineUrl + "?after=" + after, { credentials: "same-origin" })
      .then(function (r) {
        // Signed out meanwhile (a session that expired tells the socket nothing): the address leads
        // to the sign-in page. Trying again would not help.
        if (r.redirected) {
          denied = true;
          live.textContent = "You were signed out: sign in again to see what is new.";
        }
        return r.ok && !r.redirected ? r.json() : Promise.reject(r.status);
      })
      .then(function (data) {
        apply(data);
        retryDelay = 1000;
        if (listening) live.textContent = "Live";
      })
      .catch(function () {
        if (denied) return;
        live.textContent = "Could not load what is new; retrying…";
        retryLater();
      })
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  function reconnectLater() {
    socket = null;
    listening = false;
    live.textContent = "Reconnecting…";
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 10000);
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var own = new WebSocket(scheme + location.host + "/ws/staff/tickets/" + root.dataset.ticketId + "/");
    socket = own;
    own.onmessage = function (event) {
      if (socket !== own) return;
      var frame = null;
      try { frame = JSON.parse(event.data); } catch (ignored) { /* any frame means "read what is new" */ }
      if (frame && frame.type === "pong") return; // the heartbeat's answer: nothing changed
      if (frame && frame.type === "ready") {
        delay = 500;
        listening = true;
        live.textContent = "Live";
      }
      refresh();
    };
    own.onclose = function (event) {
      if (socket !== own) return;
      listening = false;
      if (event.code === 4403) {
        if (!denied) live.textContent = "Not allowed: sign in again.";
        denied = true;
        refresh(); // signed out, or no longer allowed? The timeline's address tells (a sign-in page)
        return;
      }
      reconnectLater();
    };
    // Gone silent without closing: a new socket's "ready" reads what it missed.
    window.heartbeat.watch(own, function () {
      if (socket === own) reconnectLater();
    });
  }

  // What a person writes in the reply and note boxes is kept in this tab, by person and ticket,
  // until the page shows it stored (its form's client message id on the timeline). A session that
  // ended meanwhile sends them to sign in, and the POST, with their words, is dropped on the way:
  // back on this page after signing in, the words are in the box again, under the same id (the
  // server stores a message once per id, so a send that did arrive is never stored twice).
  function keepDrafts() {
    document.querySelectorAll("#composer form").forEach(function (form) {
      var box = form.querySelector("textarea[name=body]");
      var id = form.querySelector("input[name=client_msg_id]");
      if (!box || !id) return;
      var key = "staff-draft-" + root.dataset.user + "-" + root.dataset.ticketId + "-" + form.className;
      var kept = null;
      try {
        kept = JSON.parse(window.sessionStorage.getItem(key) || "null");
      } catch (e) {
        kept = null;
      }
      var stored = kept && typeof kept.id === "string" &&
        timeline.querySelector('li[data-client-msg-id="' + CSS.escape(kept.id) + '"]');
      if (stored) {
        window.sessionStorage.removeItem(key);
      } else if (kept && typeof kept.body === "string" && kept.body.trim() && !box.value.trim()) {
        box.value = kept.body;
        id.value = kept.id;
        var note = document.createElement("p");
        note.className = "muted";
        note.id = form.classList.contains("reply") ? "reply-kept" : "note-kept";
        note.setAttribute("role", "status");
        note.textContent = "What you wrote here is back in the box, not sent yet: press " +
          form.querySelector("button[type=submit]").textContent + " to send it.";
        box.insertAdjacentElement("beforebegin", note);
      }
      function keep() {
        try {
          if (box.value.trim()) window.sessionStorage.setItem(key, JSON.stringify({ body: box.value, id: id.value }));
          else window.sessionStorage.removeItem(key);
        } catch (e) {
          /* storage off: the form still goes */
        }
      }
      box.addEventListener("input", keep);
      form.addEventListener("submit", keep);
    });
  }

  // A form sent once: a second click while it is on its way sends nothing more (the server
  // would store it once anyway, under the same client message id). One the page refused to send
  // (past a box's limit, limits.js, loaded first) is not on its way.
  document.querySelectorAll("form").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (event.defaultPrevented) return;
      if (form.dataset.sending) { event.preventDefault(); return; }
      form.dataset.sending = "1";
    });
  });
  keepDrafts();
  connect();
})();
