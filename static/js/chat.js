/*
 * The customer's chat: live timeline and streamed answers over one WebSocket,
 * messages sent over HTTP with a client message ID (a retry never posts twice).
 *
 * Frames from the server (see tickets/consumers.py):
 *   {type: "event", seq, kind, ...}       a public timeline event, in seq order
 *   {type: "token", step, offset, text}   a piece of the answer being streamed
 *   {type: "token", step, dropped: true}  that step failed: its words leave the page
 *   {type: "ready", seq}                  the replay is done; live from here
 * Frame to the server:
 *   {type: "resync"}                      "I missed part of a stream; send it again"
 * and the heartbeat's ping, answered with a pong, on a socket gone quiet (static/js/heartbeat.js).
 *
 * What makes reconnects safe:
 *   - lastSeq is the highest event seq applied; a reconnect asks ?after=lastSeq
 *     and any event at or below it is dropped;
 *   - per streaming step the page keeps the text it has; a token frame only
 *     appends what lies beyond that (offsets count code points, as Python does);
 *   - a token for a newer step of the same run replaces the bubble (a generation
 *     cut off and generated again); one of a newer run leaves the bubble in place,
 *     no longer streaming, until its message comes (events come after a ledger
 *     read, tokens straight away); the agent's message event replaces the bubble
 *     with the final text, and tokens of that step or older are ignored afterwards;
 *   - while a person has the ticket, no words of a run the timeline had started
 *     by then are shown; a later run's are (the server streams none until the
 *     agent has the ticket again, so they may come before the status says so).
 *
 * A send that fails (no network, a server error) is tried twice more, then shown as
 * "Not sent. Retry"; failed sends are tried again, in order, when the connection
 * returns (the browser comes back online, or the socket reconnects). Every attempt
 * carries the same client message ID, so the server stores the message once.
 * A send refused because the session ended says so, with a sign-in link that comes
 * back to this ticket; the unsent text waits in this tab's sessionStorage and is put
 * back in the message box after signing in. So do words still in the box when the page
 * goes (a reload, that sign-in link).
 * Words the ticket was closed before they reached it (a send refused for the close, one kept over a
 * reload or a sign-out, the text in the box when the close arrives) stay on the page, kept in this tab,
 * shown not sent, with a link that opens a new ticket with them.
 *
 * User text is only ever set with textContent, never as HTML.
 */
(function () {
  "use strict";

  var configEl = document.getElementById("chat-config");
  if (!configEl) return;
  var config = JSON.parse(configEl.textContent);
  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  // The browser's CSRF cookie at the time of the send: signing in again (in another tab) gives a new
  // secret, and the token this page was rendered with would be refused from then on.
  function csrfToken() {
    var found = document.cookie.match(new RegExp("(?:^|;\\s*)" + config.csrfCookie + "=([^;]+)"));
    return found ? decodeURIComponent(found[1]) : csrfMeta ? csrfMeta.getAttribute("content") : "";
  }

  var scroller = document.getElementById("chat-scroll");
  var log = document.getElementById("chat-log");
  var live = document.getElementById("chat-live");
  var typingEl = document.getElementById("chat-typing");
  var statusEl = document.getElementById("chat-status");
  var statusTextEl = document.getElementById("chat-status-text");
  var connectionEl = document.getElementById("chat-connection");
  var form = document.getElementById("chat-composer");
  var input = document.getElementById("chat-input");
  var sendButton = document.getElementById("chat-send");
  var note = document.getElementById("chat-note");

  var SEND_TIMEOUT_MS = 20000; // see sendTimeout
  var SLOW_UPLINK_BYTES_PER_SECOND = 16384;

  var state = {
    lastSeq: config.afterSeq,
    status: config.status,
    typing: config.typing,
    stream: null, // {step, text, length, el, textEl}
    posting: [], // streams of earlier runs overtaken by a newer one, shown until their message comes
    doneStep: 0, // tokens of this step or older are ignored
    lastRun: config.run || 0, // the latest run the timeline has started, as far as the page has read it
    socket: null,
    connected: false,
    denied: false,
    deniedCode: null, // 4403 (signed out) or 4404, while denied
    attempts: 0,
    reconnects: 0,
    holdUntil: 0,
    sendsHeldUntil: 0, // a 429's wait: no message is sent before it; after it, the waiting ones in order
    resyncAsked: false,
    streamedSinceConnect: false, // a token came on this connection (its catch-up's, or live)
    sendTimeoutMs: SEND_TIMEOUT_MS,
    pending: {}, // client_msg_id -> element, until its event arrives
    unsent: {}, // client_msg_id -> text, until the server has it
  };
  var QUICK_RETRIES = 2;
  var UNSENT_KEY = "chat-unsent-" + config.ticketId;
  // Messages not yet stored, by client message ID: kept across a reload, sent again under the same ID.
  var PENDING_KEY = "chat-pending-" + config.ticketId;
  var connectionTimer = null;

  // --- small helpers --------------------------------------------------------------------

  function codePoints(text) {
    return Array.from(text);
  }

  function nearBottom() {
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  }

  function keepScrolled(wasNearBottom) {
    if (wasNearBottom) scroller.scrollTop = scroller.scrollHeight;
  }

  function formatTimes(root) {
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (!isNaN(when.getTime())) {
        times[i].textContent = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      }
    }
  }

  function newClientMsgId() {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map
      .call(bytes, function (b) {
        return ("0" + b.toString(16)).slice(-2);
      })
      .join("");
  }

  function messageElement(author, authorName, text, at) {
    var li = document.createElement("li");
    li.className = "msg from-" + author;
    var meta = document.createElement("div");
    meta.className = "msg-meta";
    var who = document.createElement("span");
    who.className = "msg-author";
    who.textContent = authorName;
    meta.appendChild(who);
    meta.appendChild(document.createTextNode(" "));
    var time = document.createElement("time");
    time.setAttribute("datetime", at || new Date().toISOString());
    meta.appendChild(time);
    var bubble = document.createElement("div");
    bubble.className = "bubble";
    bubble.dir = "auto"; // each message reads in its own direction (Arabic, Hebrew: right to left)
    bubble.textContent = text;
    li.appendChild(meta);
    li.appendChild(bubble);
    formatTimes(li);
    return li;
  }

  // Items with a seq sit in seq order; messages still being sent (no seq) stay last.
  function insertBySeq(el, seq) {
    el.setAttribute("data-seq", String(seq));
    var ref = null;
    for (var child = log.firstElementChild; child; child = child.nextElementSibling) {
      if (child === el) continue;
      var childSeq = child.getAttribute("data-seq");
      if (childSeq === null || Number(childSeq) > seq) {
        ref = child;
        break;
      }
    }
    log.insertBefore(el, ref);
  }

  // --- status line ----------------------------------------------------------------------

  function renderStatus() {
    var text = state.typing ? config.typingText : config.statusText[state.status] || state.status;
    statusTextEl.textContent = text;
    statusEl.className = "chat-status " + state.status + (state.typing ? " typing" : "");
    typingEl.hidden = !(state.typing && !state.stream);
    var closed = state.status === "closed";
    input.disabled = closed;
    sendButton.disabled = closed;
    // The file picker closes with the rest of the composer (as the page rendered closed has it).
    var files = document.getElementById("chat-files");
    if (files) files.disabled = closed;
    if (closed) note.textContent = "This ticket is closed. Open a new ticket from My tickets if you need more help.";
  }

  function setConnected(connected) {
    state.connected = connected;
    clearTimeout(connectionTimer);
    if (connected || state.denied) {
      connectionEl.hidden = !state.denied;
      return;
    }
    // A blip shorter than a second is not worth a banner.
    connectionTimer = setTimeout(function () {
      connectionEl.hidden = state.connected;
    }, 1000);
  }

  // --- the streamed answer --------------------------------------------------------------

  // Stream ids are run << 20 | index << 10 | attempt.
  var RUN_SPAN = 1048576;

  function runOf(step) {
    return Math.floor(step / RUN_SPAN);
  }

  function dropStream() {
    if (!state.stream) return;
    state.doneStep = Math.max(state.doneStep, state.stream.step);
    state.stream.el.remove();
    state.stream = null;
  }

  // Off the page, without ruling out its later pieces (they bring its text back, through a resync).
  function clearStream() {
    if (!state.stream) return;
    state.stream.el.remove();
    state.stream = null;
  }

  // A run's answer overtaken by the next run's words is not dropped: its message is on its way (it
  // was committed before the next run began; events come after a ledger read, tokens straight away).
  // Its words stay, no longer streaming, until that message (or the run's end) takes their place.
  function keepUntilPosted() {
    var stream = state.stream;
    state.doneStep = Math.max(state.doneStep, stream.step);
    stream.el.classList.remove("streaming");
    stream.el.classList.add("posting");
    state.posting.push(stream);
    state.stream = null;
  }

  // The kept answers that ``done`` says are over (posted, or ended without a message).
  function dropPosting(done) {
    state.posting = state.posting.filter(function (kept) {
      if (!done(kept.step)) return true;
      kept.el.remove();
      return false;
    });
  }

  // While a person has the ticket, the agent's answer in flight is not posted: none of it is shown.
  var PERSON_HAS_IT = { with_human: true, resolved: true, closed: true };

  // A person took the ticket: no answer begun before now is posted, so none of its words are shown,
  // whenever they arrive (a reconnect's catch-up can read them before they leave the buffer). The
  // server streams no answer while a person has the ticket, so words of a run the timeline had not
  // started by then mean the agent has it again: they show before the status change that says so.
  function personTookIt() {
    endStreams({});
    state.doneStep = Math.max(state.doneStep, (state.lastRun + 1) * RUN_SPAN - 1);
  }

  function onToken(frame) {
    if (frame.dropped) {
      // That step failed: its answer will not be posted, and the next attempt starts afresh.
      if (state.stream && state.stream.step <= frame.step) dropStream();
      dropPosting(function (step) { return step === frame.step; });
      state.doneStep = Math.max(state.doneStep, frame.step);
      renderStatus();
      return;
    }
    state.streamedSinceConnect = true;
    if (frame.step <= state.doneStep) return;
    var stream = state.stream;
    if (stream && frame.step < stream.step) return;
    var wasNearBottom = nearBottom();
    if (!stream || frame.step > stream.step) {
      // Another attempt at the same step (the last one was cut off) or the run's next step: the words
      // shown will not be posted. The next run's answer: they will (see keepUntilPosted).
      if (stream && runOf(frame.step) > runOf(stream.step)) keepUntilPosted();
      else dropStream();
      var el = messageElement("agent", config.authorNames.agent, "", null);
      el.classList.add("streaming");
      live.insertBefore(el, typingEl);
      stream = state.stream = { step: frame.step, text: "", length: 0, el: el, textEl: el.querySelector(".bubble") };
    }
    var piece = codePoints(frame.text);
    if (frame.offset > stream.length) {
      // A piece went missing: ask for the whole text so far (it comes at offset 0).
      if (!state.resyncAsked && state.socket && state.socket.readyState === WebSocket.OPEN) {
        state.resyncAsked = true;
        state.socket.send(JSON.stringify({ type: "resync" }));
        setTimeout(function () {
          state.resyncAsked = false; // ask again at the next gap if the answer got lost
        }, 1000);
      }
      return;
    }
    if (frame.offset === 0) state.resyncAsked = false;
    var end = frame.offset + piece.length;
    if (end <= stream.length) return; // already shown
    stream.text += piece.slice(stream.length - frame.offset).join("");
    stream.length = end;
    stream.textEl.textContent = stream.text;
    renderStatus();
    keepScrolled(wasNearBottom);
  }

  // --- timeline events ------------------------------------------------------------------

  // Tokens go out before the events a doorbell reads: the next run's answer can already be
  // streaming when the last answer's message (or its run's end) arrives. That one is not dropped.
  // Does ``item`` (an agent's message, the end of a run) end the answer streamed under ``step``? An
  // item that names neither its stream nor its run is about the runs the timeline has started so far.
  function ends(item, step) {
    if (typeof item.stream === "number") return step <= item.stream;
    if (typeof item.run === "number") return runOf(step) <= item.run;
    return runOf(step) <= state.lastRun;
  }

  // The answers that ``item`` ends leave the page: the one streaming, and those kept until posted.
  function endStreams(item) {
    if (state.stream && ends(item, state.stream.step)) dropStream();
    dropPosting(function (step) { return ends(item, step); });
  }

  function onMessage(item) {
    if (item.author === "agent") endStreams(item);
    // The streamed text this message replaces: tokens of that stream that arrive later are old news.
    if (typeof item.stream === "number") state.doneStep = Math.max(state.doneStep, item.stream);
    var el = null;
    if (item.client_msg_id && state.pending[item.client_msg_id]) {
      el = state.pending[item.client_msg_id];
      delete state.pending[item.client_msg_id];
      delete state.unsent[item.client_msg_id];
      keepUnsent();
      if (attach()) attach().forget(item.client_msg_id);
    } else if (item.message_id) {
      el = log.querySelector('li.msg[data-message-id="' + Number(item.message_id) + '"]');
    }
    if (el) {
      el.classList.remove("pending", "sending", "failed");
      clearFailure(el); // a send whose answer was lost did reach us
    } else {
      el = messageElement(item.author, item.author_name, item.text, item.at);
    }
    if (attach() && item.attachments) attach().show(el, item.attachments);
    if (item.message_id) el.setAttribute("data-message-id", String(item.message_id));
    if (item.client_msg_id) el.setAttribute("data-client-msg-id", item.client_msg_id);
    insertBySeq(el, item.seq);
  }

  function onNotice(item) {
    var li = document.createElement("li");
    li.className = "notice tone-" + (item.tone || "info");
    var span = document.createElement("span");
    span.textContent = item.text;
    li.appendChild(span);
    insertBySeq(li, item.seq);
  }

  // --- questions before money moves: Confirm / Cancel ----------------------------------------
  // Only the button counts (a typed "yes" is a message). One answer per question: the buttons go
  // at the first click, and the server keeps the first answer (a second tab gets the same one).

  function onConfirm(item) {
    var li = document.createElement("li");
    li.className = "confirm";
    li.setAttribute("data-call-id", String(item.call_id));
    li.setAttribute("data-digest", item.digest || "");
    var text = document.createElement("p");
    text.className = "confirm-text";
    text.textContent = item.text;
    li.appendChild(text);
    var actions = document.createElement("div");
    actions.className = "confirm-actions";
    [["confirm", "Confirm", "primary"], ["cancel", "Cancel", ""]].forEach(function (spec) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = spec[2];
      button.setAttribute("data-answer", spec[0]);
      button.textContent = spec[1];
      actions.appendChild(button);
    });
    li.appendChild(actions);
    var note = document.createElement("p");
    note.className = "confirm-note";
    note.setAttribute("role", "status");
    li.appendChild(note);
    insertBySeq(li, item.seq);
  }

  // The question an answer (at ``seq``) is to: the latest one on that call shown before it (a call
  // asked again, for another amount, has a question of its own, still to answer).
  function questionBefore(callId, seq) {
    var found = null;
    log.querySelectorAll('li.confirm[data-call-id="' + Number(callId) + '"]').forEach(function (card) {
      if (Number(card.getAttribute("data-seq")) < seq) found = card;
    });
    return found;
  }

  function answered(card, words) {
    if (!card) return;
    card.classList.add("answered");
    card.querySelectorAll("button[data-answer]").forEach(function (b) { b.disabled = true; b.hidden = true; });
    if (words) card.querySelector(".confirm-note").textContent = words;
  }

  log.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-answer]") : null;
    if (!button) return;
    var card = button.closest("li.confirm");
    if (!card || card.dataset.sending) return;
    card.dataset.sending = "1";
    var note = card.querySelector(".confirm-note");
    card.querySelectorAll("button[data-answer]").forEach(function (b) { b.disabled = true; });
    note.textContent = "Sending…";
    // Given up unanswered as a message's send is (a request lost on a half-open connection), so
    // the buttons come back: pressed again, the same answer is the first one's result.
    var giveUp = new AbortController();
    var timer = setTimeout(function () {
      giveUp.abort();
    }, state.sendTimeoutMs);
    fetch("/tickets/" + config.ticketId + "/confirmations/" + card.getAttribute("data-call-id"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ answer: button.getAttribute("data-answer"), digest: card.getAttribute("data-digest") }),
      signal: giveUp.signal,
    })
      .then(function (r) {
        clearTimeout(timer); // answered: its body is read however long it takes
        return r.json().then(
          function (body) { return { ok: r.ok, status: r.status, body: body }; },
          function () { return { ok: false, status: r.status, body: null }; } // not JSON: an error page
        );
      })
      .then(function (res) {
        // Answered meanwhile over the socket (this answer came late, or not at all): it stands.
        if (!res.ok && card.classList.contains("answered")) return;
        if (res.ok) liveAgain();
        // The server's words for the answer: those the socket's event and a reload show.
        if (res.ok) answered(card, res.body.text);
        else if (res.status === 401 || (res.status === 404 && res.body && res.body.code === "not_this_account")) {
          // Signed out, or another customer signed in on this browser: nothing was done; the buttons stay
          // for when the question's customer is back.
          delete card.dataset.sending;
          card.querySelectorAll("button[data-answer]").forEach(function (b) { b.disabled = false; });
          note.textContent = ((res.body && res.body.error) || "You were signed out, so nothing was done.") + " ";
          note.appendChild(signInLink());
        } else if (res.body && res.body.error) answered(card, res.body.error);
        else {
          delete card.dataset.sending;
          card.querySelectorAll("button[data-answer]").forEach(function (b) { b.disabled = false; });
          note.textContent = "Not sent: the server answered " + res.status + ". Please try again.";
        }
      })
      .catch(function () {
        clearTimeout(timer);
        delete card.dataset.sending;
        if (card.classList.contains("answered")) return;
        card.querySelectorAll("button[data-answer]").forEach(function (b) { b.disabled = false; });
        note.textContent = "Not sent. Check your connection and try again.";
      });
  });

  function onEvent(item) {
    if (item.seq <= state.lastSeq) return; // replayed: already applied
    state.lastSeq = item.seq;
    var wasNearBottom = nearBottom();
    if (item.kind === "message") onMessage(item);
    else if (item.kind === "notice") onNotice(item);
    else if (item.kind === "confirm") onConfirm(item);
    if (item.answers) answered(questionBefore(item.answers, item.seq), item.text);
    if (typeof item.run === "number") state.lastRun = Math.max(state.lastRun, item.run);
    if (typeof item.status === "string") {
      if (item.status === "closed" && state.status !== "closed") keepDraftOfClosed();
      state.status = item.status;
      if (PERSON_HAS_IT[item.status]) personTookIt();
    }
    if (typeof item.typing === "boolean") {
      state.typing = item.typing;
      // A run that ended or paused without posting it leaves no answer to show.
      if (!item.typing) endStreams(item);
    }
    renderStatus();
    afterEvent(item);
    keepScrolled(wasNearBottom);
  }

  // --- date separators, the rating form, what the customer has seen ----------------------

  // "Today", "Yesterday" or the date above the first item of each day, in the browser's time zone
  // (the server renders them in its own; this corrects them and adds the live ones). A separator
  // carries the seq of the item it heads, so insertBySeq keeps it in place.
  function dayKey(date) {
    var month = String(date.getMonth() + 1);
    var day = String(date.getDate());
    return date.getFullYear() + "-" + (month.length < 2 ? "0" : "") + month + "-" + (day.length < 2 ? "0" : "") + day;
  }

  function dayLabel(date) {
    var now = new Date();
    if (dayKey(date) === dayKey(now)) return "Today";
    if (dayKey(date) === dayKey(new Date(now.getFullYear(), now.getMonth(), now.getDate() - 1))) return "Yesterday";
    return date.toLocaleDateString([], { year: "numeric", month: "long", day: "numeric" });
  }

  function itemDate(el) {
    if (!el || el.getAttribute("data-seq") === null || el.classList.contains("day-separator")) return null;
    var time = el.querySelector("time[datetime]");
    var at = el.getAttribute("data-at") || (time && time.getAttribute("datetime"));
    var when = at ? new Date(at) : null;
    return when && !isNaN(when.getTime()) ? when : null;
  }

  function placeDaySeparators() {
    var previousDay = null;
    for (var child = log.firstElementChild; child; ) {
      var next = child.nextElementSibling;
      var when = itemDate(child);
      if (child.classList.contains("day-separator")) {
        // Kept only right above the first item of its day.
        var headed = itemDate(next);
        var day = headed ? dayKey(headed) : null;
        if (!day || day === previousDay || day !== child.getAttribute("data-day")) child.remove();
        else if (child.textContent !== dayLabel(headed)) child.firstElementChild.textContent = dayLabel(headed);
      } else if (when && dayKey(when) !== previousDay) {
        var above = child.previousElementSibling;
        if (!above || !above.classList.contains("day-separator")) {
          var separator = document.createElement("li");
          separator.className = "day-separator";
          separator.setAttribute("data-day", dayKey(when));
          separator.setAttribute("data-seq", child.getAttribute("data-seq"));
          var words = document.createElement("span");
          words.textContent = dayLabel(when);
          separator.appendChild(words);
          log.insertBefore(separator, child);
        }
        previousDay = dayKey(when);
      }
      child = next;
    }
  }

  // The rating form shows once the ticket is resolved, hides when it is reopened, stays when closed.
  function showRating() {
    var rating = document.getElementById("chat-rating");
    if (!rating) return;
    if (state.status === "resolved") rating.hidden = false;
    else if (state.status !== "closed") rating.hidden = true;
  }

  // The rating as the customer sends it is kept in this tab: sent after their session ended (signing
  // in again comes back here, nothing rated), it is in the form again, not sent. Dropped once the
  // page shows the form as it was sent (rated, or the form again with the server's reason).
  var RATING_KEY = "chat-rating-" + config.ticketId;
  function keepRating() {
    var form = document.querySelector("#chat-rating form");
    if (!form) return;
    var comment = form.querySelector("textarea[name=comment]");
    function shown() {
      var checked = form.querySelector("input[name=score]:checked");
      return { score: checked ? checked.value : "", comment: comment.value };
    }
    var kept = null;
    try {
      kept = JSON.parse(window.sessionStorage.getItem(RATING_KEY) || "null");
    } catch (e) {
      kept = null;
    }
    var now = shown();
    var valid = kept && typeof kept.score === "string" && typeof kept.comment === "string";
    if (!valid || (kept.score === now.score && kept.comment === now.comment)) {
      try {
        window.sessionStorage.removeItem(RATING_KEY);
      } catch (e) {
        /* storage off: nothing was kept */
      }
    } else {
      var radio = form.querySelector('input[name=score][value="' + CSS.escape(kept.score) + '"]');
      if (radio) radio.checked = true;
      comment.value = kept.comment;
      var note = document.createElement("p");
      note.className = "muted kept";
      note.id = "rating-kept";
      note.setAttribute("role", "status");
      note.textContent = "Your rating is back in the form, not sent yet: press " +
        form.querySelector("button[type=submit]").textContent + " to send it.";
      form.querySelector("fieldset").appendChild(note);
    }
    form.addEventListener("submit", function () {
      try {
        window.sessionStorage.setItem(RATING_KEY, JSON.stringify(shown()));
      } catch (e) {
        /* storage off: the form still goes */
      }
    });
  }
  keepRating();

  // Replies shown while the page is visible are read: tell the server (My tickets' unread marker).
  var seenSent = config.afterSeq;
  function markSeen() {
    if (document.visibilityState !== "visible" || state.lastSeq <= seenSent) return;
    if (!state.socket || state.socket.readyState !== WebSocket.OPEN) return;
    seenSent = state.lastSeq;
    state.socket.send(JSON.stringify({ type: "seen", seq: seenSent }));
  }
  document.addEventListener("visibilitychange", markSeen);

  function afterEvent(item) {
    var el = log.querySelector('[data-seq="' + Number(item.seq) + '"]:not(.day-separator)');
    // Messages and notices mark the day (the server does the same); other items go with them.
    if (el && item.at && (item.kind === "message" || item.kind === "notice")) el.setAttribute("data-at", item.at);
    placeDaySeparators();
    showRating();
    markSeen();
  }

  // --- the socket -----------------------------------------------------------------------

  function onFrame(frame) {
    if (frame.type === "event") onEvent(frame);
    else if (frame.type === "token") onToken(frame);
    else if (frame.type === "ready") {
      // The catch-up sends the answer being streamed, if any: none came, so the one shown is not
      // (its step failed while the socket was away); a page reloaded now would not show it either.
      if (!state.streamedSinceConnect) clearStream();
      // An answer kept until posted whose message the catch-up did not bring was not posted.
      dropPosting(function () { return true; });
      renderStatus();
      state.attempts = 0;
      setConnected(true);
      markSeen(); // what came while the socket was away and the page is showing now
      retryFailed();
    }
  }

  function connect() {
    if (state.denied || state.socket) return;
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + window.location.host + "/ws/tickets/" + config.ticketId + "/?after=" + state.lastSeq;
    var socket = new WebSocket(url);
    state.socket = socket;
    state.resyncAsked = false;
    state.streamedSinceConnect = false;
    socket.onmessage = function (message) {
      if (state.socket !== socket) return;
      onFrame(JSON.parse(message.data));
    };
    // Gone silent without closing (static/js/heartbeat.js): a new socket's catch-up brings what it missed.
    window.heartbeat.watch(socket, function () {
      if (state.socket !== socket) return;
      state.socket = null;
      setConnected(false);
      scheduleReconnect();
    });
    socket.onclose = function (closed) {
      if (state.socket !== socket) return;
      state.socket = null;
      if (closed.code === 4403 || closed.code === 4404) {
        state.denied = true;
        state.deniedCode = closed.code;
        if (closed.code === 4403) {
          connectionEl.textContent = "You were signed out. ";
          connectionEl.appendChild(signInLink());
          connectionEl.appendChild(document.createTextNode(" to see new replies."));
        } else {
          connectionEl.textContent = "This conversation is not available.";
        }
        setConnected(false);
        return;
      }
      setConnected(false);
      scheduleReconnect();
    };
  }

  // The socket ended with a sign-out, and a send has just been taken: signed in again (in another
  // tab), so the conversation is live again here too.
  var CONNECTION_LOST = connectionEl.textContent;
  function liveAgain() {
    if (!state.denied || state.deniedCode !== 4403) return;
    state.denied = false;
    state.deniedCode = null;
    connectionEl.textContent = CONNECTION_LOST;
    connect();
  }

  function scheduleReconnect() {
    var backoff = Math.min(8000, 250 * Math.pow(2, state.attempts)) * (0.75 + Math.random() * 0.5);
    state.attempts += 1;
    var delay = Math.max(backoff, state.holdUntil - Date.now());
    setTimeout(function () {
      state.reconnects += 1;
      connect();
    }, delay);
  }

  window.addEventListener("online", function () {
    if (!state.socket) connect();
    retryFailed();
  });

  // --- attachments (static/js/attachments.js): a message with files is sent as a form ---------

  function attach() {
    return window.chatAttachments || null;
  }

  function sendHeaders(clientMsgId) {
    // Accept: a refusal comes back as JSON with its reason, for a form with files as for JSON.
    var headers = { "X-CSRFToken": csrfToken(), Accept: "application/json" };
    if (!(attach() && attach().has(clientMsgId))) headers["Content-Type"] = "application/json";
    return headers;
  }

  function sendBody(clientMsgId, text) {
    if (attach() && attach().has(clientMsgId)) return attach().form(clientMsgId, text);
    return JSON.stringify({ client_msg_id: clientMsgId, body: text });
  }

  // --- sending --------------------------------------------------------------------------

  function keepUnsent() {
    try {
      var texts = {};
      Object.keys(state.unsent).forEach(function (id) {
        if (typeof state.unsent[id] === "string" && state.unsent[id]) texts[id] = state.unsent[id];
      });
      if (Object.keys(texts).length) window.sessionStorage.setItem(PENDING_KEY, JSON.stringify(texts));
      else window.sessionStorage.removeItem(PENDING_KEY);
    } catch (e) {
      /* storage full or off: the page still has them */
    }
  }

  // Messages a reload interrupted before they were stored: sent again under the same IDs (the server
  // stores each once, and answers with the original if it had it).
  function sendKeptMessages() {
    var kept = {};
    try {
      kept = JSON.parse(window.sessionStorage.getItem(PENDING_KEY) || "{}") || {};
    } catch (e) {
      kept = {};
    }
    var storedAlready = false;
    Object.keys(kept).forEach(function (clientMsgId) {
      var text = kept[clientMsgId];
      if (typeof text !== "string" || !text || state.pending[clientMsgId]) return;
      if (log.querySelector('li.msg[data-seq][data-client-msg-id="' + CSS.escape(clientMsgId) + '"]')) {
        // Stored before the reload (its answer never came back): the page shows it already, and a
        // second bubble until the send's answer would show it twice. Its kept files go too.
        storedAlready = true;
        if (attach()) attach().takeBack(clientMsgId).then(function () { attach().forget(clientMsgId); });
        return;
      }
      var el = messageElement("customer", config.authorNames.customer, text, null);
      el.classList.add("pending", "sending");
      el.setAttribute("data-client-msg-id", clientMsgId);
      state.pending[clientMsgId] = el;
      state.unsent[clientMsgId] = text;
      log.appendChild(el);
      if (input.disabled) {
        // Closed before it reached us (a message stored before the close is on the page already).
        markClosed(el, clientMsgId, text);
        return;
      }
      // Its files, if it had any, go again with it (kept in IndexedDB until it was stored); in the
      // order written, as when they were first sent.
      var ready = (attach() ? attach().takeBack(clientMsgId) : Promise.resolve([])).then(function (files) {
        if (files.length) attach().pending(el, files);
        else if (attach()) withoutFilesLostOverReload(clientMsgId, text, el);
      });
      sendInOrder(clientMsgId, text, el, ready);
    });
    if (storedAlready) keepUnsent();
  }

  // The browser's copy of a message's files was not found after the reload (IndexedDB cleared, off in a
  // private window, past its hour): it went as if it had had none, a photo alone as a text of its name.
  // Words go without them, and the page says so; a message of those files alone is not sent, and says why.
  function withoutFilesLostOverReload(clientMsgId, text, el) {
    var lost = attach().lostOverReload(clientMsgId);
    if (!lost) return;
    attach().forget(clientMsgId);
    var why = lost + " could not be kept over the reload";
    if (text === codePoints(lost).slice(0, config.maxChars).join("")) {
      delete state.unsent[clientMsgId];
      keepUnsent();
      markFailed(el, clientMsgId, why + ". Choose it again to send it.", false);
      return;
    }
    attach().note(why + ", so your message is sent without it. Choose it again to send it.");
  }

  function signInLink() {
    var link = document.createElement("a");
    link.href = config.loginUrl;
    link.textContent = "Sign in again";
    return link;
  }

  function clearFailure(el) {
    var why = el.querySelector(".msg-error");
    if (why) why.remove();
    el.removeAttribute("data-retry");
  }

  // retryable: a network or server failure, tried again on Retry and when the connection returns.
  function markFailed(el, clientMsgId, reason, retryable) {
    if (!retryable) delete state.pending[clientMsgId];
    el.classList.remove("sending");
    el.classList.add("failed");
    clearFailure(el);
    var why = document.createElement("div");
    why.className = "msg-error";
    why.textContent = reason ? "Not sent: " + reason : "Not sent. ";
    if (retryable) {
      el.setAttribute("data-retry", "");
      var again = document.createElement("button");
      again.type = "button";
      again.className = "link msg-retry";
      again.textContent = "Retry";
      again.addEventListener("click", function () {
        resend(el);
      });
      why.appendChild(again);
    }
    el.appendChild(why);
  }

  function markSignedOut(el, clientMsgId, text, reason) {
    markFailed(el, clientMsgId, null, false);
    delete state.unsent[clientMsgId];
    keepUnsent();
    var kept = window.sessionStorage.getItem(UNSENT_KEY);
    window.sessionStorage.setItem(UNSENT_KEY, kept ? kept + "\n\n" + text : text);
    var why = el.querySelector(".msg-error");
    why.textContent = "Not sent: " + (reason || "you were signed out.") + " ";
    why.appendChild(signInLink());
    var back = document.createTextNode(" and your message will be back in the box.");
    why.appendChild(back);
    if (attach() && attach().has(clientMsgId)) {
      attach()
        .stash(clientMsgId)
        .then(function (stashed) {
          attach().forget(clientMsgId); // kept for the ticket now, not for this send
          back.textContent = stashed
            ? " and your message and its files will be back in the box."
            : " and your message will be back in the box (choose its files again).";
        });
    }
  }

  // The ticket was closed before the message reached it: the message stays on the page, and in this tab
  // over reloads (a closed ticket's page has no composer to put it back in), with a link that opens a new
  // ticket with its words, until that link is followed. Its files are not kept: the new-ticket form takes
  // none (they go in its chat).
  var NEW_TICKET_KEY = "new-ticket-sent"; // read by static/js/new_ticket.js
  function markClosed(el, clientMsgId, text, reason) {
    markFailed(el, clientMsgId, reason || "this ticket was closed before it reached us. ", false);
    var withFiles = attach() && attach().has(clientMsgId);
    if (attach()) attach().forget(clientMsgId);
    var link = document.createElement("a");
    link.href = config.newTicketUrl;
    link.textContent = "Send it in a new ticket";
    link.addEventListener("click", function () {
      try {
        window.sessionStorage.setItem(NEW_TICKET_KEY, JSON.stringify({
          subject: config.subject,
          body: text,
          note: "The message you wrote on your closed ticket is in the form: press Send to open a new ticket with it.",
        }));
      } catch (e) {
        /* storage off: the form opens empty, and the message is still on the closed ticket's page */
      }
      delete state.unsent[clientMsgId];
      keepUnsent();
    });
    var why = el.querySelector(".msg-error");
    why.appendChild(link);
    why.appendChild(document.createTextNode(withFiles ? " (attach its files again there)." : "."));
  }

  // The ticket closed under words still in the box: the box is disabled (its text cannot even be
  // selected) and they were gone at the next reload. They become a message the close kept from reaching
  // us (markClosed), kept in this tab over reloads.
  function keepDraftOfClosed() {
    var text = input.value.trim();
    if (!text) return;
    var clientMsgId = newClientMsgId();
    var el = messageElement("customer", config.authorNames.customer, text, null);
    el.setAttribute("data-client-msg-id", clientMsgId);
    state.unsent[clientMsgId] = text;
    keepUnsent();
    log.appendChild(el);
    markClosed(el, clientMsgId, text, "this ticket was closed while you were writing it. ");
    input.value = "";
    autosize();
  }

  // How long a send may go unanswered before it is given up and tried again (under the same client
  // message ID, so a send that did arrive is stored once): a request lost on a half-open connection
  // (a train's tunnel, a phone changing networks) otherwise stayed "sending" as long as the page was
  // open, and the message never arrived. Files get the time a slow uplink needs for them.
  function sendTimeout(clientMsgId) {
    var bytes = attach() && attach().has(clientMsgId) ? attach().bytes(clientMsgId) : 0;
    return state.sendTimeoutMs + (1000 * bytes) / SLOW_UPLINK_BYTES_PER_SECOND;
  }

  // Settles once the message is sent or shown as not sent.
  function post(clientMsgId, text, el, attempt) {
    // No longer waiting to be sent (given up before its turn came: its files were lost): not posted.
    if (state.unsent[clientMsgId] === undefined) return Promise.resolve();
    return withoutUnreadableFiles(clientMsgId, text, el).then(function (sendable) {
      if (sendable !== null) return postNow(clientMsgId, sendable, el, attempt);
    });
  }

  // A file chosen for the message and then moved, changed or deleted on the computer cannot be read
  // by the browser any more: its upload fails at every try, as the network's would, and the words
  // never went. The message goes without it, and the page says which file stayed behind; a message
  // of such files alone is not sent, and says why. A promise of the text to send (a message of files
  // alone names those it still has), or null.
  function withoutUnreadableFiles(clientMsgId, text, el) {
    if (!(attach() && attach().has(clientMsgId))) return Promise.resolve(text);
    return attach()
      .unreadable(clientMsgId)
      .then(function (lost) {
        if (!lost.length) return text;
        var filesAlone = attach().namesOf(clientMsgId) === text;
        var names = lost.map(function (file) { return file.name; }).join(", ");
        var why = names + " could not be read (moved, changed or deleted after it was chosen)";
        attach().drop(clientMsgId, lost, el);
        var left = attach().has(clientMsgId) ? attach().namesOf(clientMsgId) : "";
        if (filesAlone && !left) {
          delete state.unsent[clientMsgId];
          keepUnsent();
          markFailed(el, clientMsgId, why + ". Choose it again to send it.", false);
          return null;
        }
        if (filesAlone) {
          text = codePoints(left).slice(0, config.maxChars).join("");
          state.unsent[clientMsgId] = text;
          keepUnsent();
          el.querySelector(".bubble").textContent = text;
        }
        attach().note(why + ", so your message is sent without it. Choose it again to send it.");
        return text;
      });
  }

  function postNow(clientMsgId, text, el, attempt) {
    var giveUp = new AbortController();
    var timer = setTimeout(function () {
      giveUp.abort();
    }, sendTimeout(clientMsgId));
    return fetch("/tickets/" + config.ticketId + "/messages", {
      method: "POST",
      credentials: "same-origin",
      headers: sendHeaders(clientMsgId),
      body: sendBody(clientMsgId, text),
      signal: giveUp.signal,
    })
      .then(function (response) {
        return response
          .json()
          .catch(function () {
            return {};
          })
          .then(function (data) {
            return { status: response.status, data: data };
          });
      })
      .then(
        function (result) {
          clearTimeout(timer);
          if (result.status === 200 || result.status === 201) {
            liveAgain();
            delete state.unsent[clientMsgId];
            keepUnsent();
            if (attach()) attach().forget(clientMsgId);
            el.classList.remove("sending", "failed");
            clearFailure(el);
            var id = result.data.message && result.data.message.id;
            var shown = id && log.querySelector('li.msg[data-message-id="' + Number(id) + '"][data-seq]');
            if (shown && shown !== el) {
              el.remove(); // its event arrived first and is shown already
              delete state.pending[clientMsgId];
            } else if (id) {
              el.setAttribute("data-message-id", String(id));
            }
          } else if (result.status === 401) {
            markSignedOut(el, clientMsgId, text);
          } else if (result.status === 404 && result.data.code === "not_this_account") {
            // Another customer signed in on this browser: kept, as over a sign-out, for its own account.
            markSignedOut(el, clientMsgId, text, result.data.error);
          } else if (result.status === 409 && result.data.code === "ticket_closed") {
            markClosed(el, clientMsgId, text);
          } else if (result.status === 429) {
            // Too many too fast: say so, with the wait. Nothing more is sent until it is over (a later
            // message would be refused too, or, past the window's end, stored before this one); then
            // the waiting messages go one after another, in the order written (retryFailed).
            var wait = Math.max(1, Number(result.data.retry_after) || 5);
            markFailed(el, clientMsgId, (result.data.error || "too many messages at once.") + " It will be sent then.", true);
            withoutRetryButton(el); // it goes by itself when the wait is over; a Retry now would do nothing
            holdSends(wait * 1000);
          } else if (result.status >= 500) {
            // A server that says why (files it could not store) is quoted once the quick tries are over.
            return retry(typeof result.data.error === "string" ? result.data.error : null);
          } else {
            delete state.unsent[clientMsgId];
            keepUnsent();
            var refusal = result.data.error || "please try again.";
            if (!input.value.trim() && !input.disabled) {
              // Refused for what it holds: ready to send again, mended, unless the customer is
              // already writing the next one (a file the refusal names is left out).
              var withFiles = attach() && attach().has(clientMsgId);
              if (!withFiles || attach().namesOf(clientMsgId) !== text) input.value = text;
              if (withFiles) {
                var refusedIndex = result.data.file_index;
                attach().chooseAgain(clientMsgId, typeof refusedIndex === "number" ? refusedIndex : null);
              }
              autosize();
            }
            if (attach()) attach().forget(clientMsgId);
            markFailed(el, clientMsgId, refusal, false);
          }
        },
        function () {
          clearTimeout(timer);
          return retry(); // the network, or no answer in time: the same client message ID makes the retry safe
        }
      );

    function retry(reason) {
      // Its event came over the socket: the server has it, whatever became of this answer.
      if (state.unsent[clientMsgId] === undefined) return;
      if (attempt >= QUICK_RETRIES || navigator.onLine === false) {
        markFailed(el, clientMsgId, reason || null, true);
        return;
      }
      return new Promise(function (resolve) {
        setTimeout(function () {
          resolve(post(clientMsgId, text, el, attempt + 1));
        }, 500 * Math.pow(2, attempt));
      });
    }
  }

  // After a 429, until its wait is over: the messages written meanwhile wait (shown as such), and
  // all of them are sent, oldest first, when it is.
  var sendsHeldTimer = null;
  function holdSends(ms) {
    var until = Date.now() + ms;
    if (until <= state.sendsHeldUntil) return;
    state.sendsHeldUntil = until;
    clearTimeout(sendsHeldTimer);
    sendsHeldTimer = setTimeout(function () {
      sendsHeldTimer = null;
      retryFailed();
    }, ms);
  }

  function sendsHeld() {
    return Date.now() < state.sendsHeldUntil;
  }

  function markHeld(el, clientMsgId) {
    var seconds = Math.max(1, Math.ceil((state.sendsHeldUntil - Date.now()) / 1000));
    markFailed(el, clientMsgId, "you are sending messages quickly; it will be sent in " + seconds + " s, after the ones before it.", true);
    withoutRetryButton(el);
  }

  function withoutRetryButton(el) {
    var again = el.querySelector(".msg-retry");
    if (again) again.remove();
  }

  function resend(el) {
    var clientMsgId = el.getAttribute("data-client-msg-id");
    var text = state.unsent[clientMsgId];
    if (!el.classList.contains("failed") || text === undefined) return Promise.resolve();
    if (sendsHeld()) return Promise.resolve(); // sent when the wait is over, in its turn
    el.classList.remove("failed");
    el.classList.add("sending");
    clearFailure(el);
    return post(clientMsgId, text, el, QUICK_RETRIES); // no quick retries: the customer is watching
  }

  // One after another, oldest first, so they arrive in the order they were written; one pass at a
  // time (the browser coming online, the socket's return and a new send all ask for one). Settles
  // when the pass (and any asked for during it) is over.
  var retrying = null;
  var retryAgain = false;
  function retryFailed() {
    if (retrying) {
      retryAgain = true;
      return retrying;
    }
    var failed = log.querySelectorAll("li.msg.failed[data-retry]");
    retrying = Array.prototype.reduce
      .call(
        failed,
        function (previous, el) {
          return previous.then(function () {
            return resend(el);
          });
        },
        Promise.resolve()
      )
      .then(function () {
        retrying = null;
        if (retryAgain) {
          retryAgain = false;
          return retryFailed();
        }
      });
    return retrying;
  }

  // The last send begun: the next waits for it (in the order written; see send).
  var lastSend = Promise.resolve();
  var SEND_ORDER_WAIT_MS = 15000;

  function send() {
    var text = input.value.trim();
    if (input.disabled) return;
    if (codePoints(text).length > config.maxChars) {
      // Refused before anything is taken: the text and the files chosen for it both stay.
      sayIfTooLong();
      return;
    }
    var files = attach() ? attach().take() : [];
    if (!text && files.length) {
      // Files alone: their names are the message (cut to the limit, never refused for it).
      text = codePoints(files.map(function (file) { return file.name; }).join(", "))
        .slice(0, config.maxChars)
        .join("");
    }
    if (!text) return;
    var clientMsgId = newClientMsgId();
    var el = messageElement("customer", config.authorNames.customer, text, null);
    el.classList.add("pending", "sending");
    el.setAttribute("data-client-msg-id", clientMsgId);
    state.pending[clientMsgId] = el;
    if (files.length) {
      attach().keep(clientMsgId, files);
      attach().keepAcrossReload(clientMsgId); // a reload sends them again with it
      attach().pending(el, files);
    }
    state.unsent[clientMsgId] = text;
    keepUnsent();
    log.appendChild(el);
    input.value = "";
    autosize();
    scroller.scrollTop = scroller.scrollHeight;
    sendInOrder(clientMsgId, text, el, Promise.resolve());
  }

  // In the order written: a message waits for the one before it to be sent or shown not sent
  // (a photo's upload is slow; a quick text after it overtook it, and the agent read them
  // reversed), but never more than SEND_ORDER_WAIT_MS after that one's request began, nor less
  // than it takes to give up a text's request that hangs and send it again (see sendTimeout).
  // Messages shown "Not sent. Retry" go first: sending this one says the connection is back (the
  // socket may never have dropped, nor the browser said "offline"), and they were written before
  // it. After a 429 none is posted until its wait is over (holdSends): this one waits its turn then.
  // ``ready``: settles when the message can be posted (its files are back).
  function sendInOrder(clientMsgId, text, el, ready) {
    lastSend = Promise.all([lastSend, ready])
      .then(retryFailed)
      .then(function () {
        if (sendsHeld()) {
          markHeld(el, clientMsgId); // after the ones waiting before it, when the wait is over
          return;
        }
        var wait = Math.max(SEND_ORDER_WAIT_MS, state.sendTimeoutMs + 1000);
        return Promise.race([
          post(clientMsgId, text, el, 0),
          new Promise(function (done) { setTimeout(done, wait); }),
        ]);
      })
      .catch(function () {
        /* one send that broke (its files not found again) never holds back the ones after it */
      });
  }

  function autosize() {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight, 160) + "px";
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    send();
    // Sent with the button (a click, or Enter on it from the keyboard): the next message is typed
    // in the box, not into a button. Not on a touch screen, where focus would open the keyboard.
    if (document.activeElement === sendButton && !input.disabled && !window.matchMedia("(pointer: coarse)").matches) {
      input.focus();
    }
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  // The box's maxlength counts UTF-16 units, so 2,000 emoji would fill a box that takes 4,000
  // characters: the page holds the limit itself, in characters, as the server counts them.
  input.removeAttribute("maxlength");
  var TOO_LONG = "A message can be at most " + config.maxChars + " characters";
  function sayIfTooLong() {
    var count = codePoints(input.value.trim()).length;
    if (count > config.maxChars) {
      note.textContent = TOO_LONG + " (this one has " + count + ").";
    } else if (note.textContent.indexOf(TOO_LONG) === 0) {
      note.textContent = "";
    }
  }
  input.addEventListener("input", function () {
    autosize();
    sayIfTooLong();
  });

  // Words in the box, not sent, when the page goes (a reload; the "Sign in again" link of a session that
  // ended while they were being written; a click away and back): kept in this tab, and put back in the
  // box when the chat opens again. Only a send refused for the sign-out kept its words before.
  var DRAFT_KEY = "chat-draft-" + config.ticketId;
  window.addEventListener("pagehide", function () {
    try {
      // A closed ticket's box is empty: what it held became a message kept with a way to a new ticket.
      if (!input.disabled && input.value.trim()) window.sessionStorage.setItem(DRAFT_KEY, input.value);
      else window.sessionStorage.removeItem(DRAFT_KEY);
    } catch (e) {
      /* storage full or off: nothing is kept */
    }
  });

  function takeDraft() {
    try {
      var draft = window.sessionStorage.getItem(DRAFT_KEY);
      window.sessionStorage.removeItem(DRAFT_KEY);
      return draft && draft.trim() ? draft : "";
    } catch (e) {
      return "";
    }
  }

  // --- start ----------------------------------------------------------------------------

  // A small handle for tests and for debugging from the console.
  window.__chat = {
    // Close the socket as a network drop would; reconnect no sooner than holdMs.
    dropSocket: function (holdMs) {
      state.holdUntil = Date.now() + (holdMs || 0);
      if (state.socket) state.socket.close();
    },
    // Give up a send unanswered after ms (tests of a request that hangs).
    sendTimeout: function (ms) {
      state.sendTimeoutMs = ms;
    },
    // Ask a socket quiet for quietMs for a pong, and give it up after waitMs without one (tests of a
    // socket that stops carrying anything without closing): static/js/heartbeat.js, for every live page.
    heartbeat: function (quietMs, waitMs) {
      window.heartbeat.waits(quietMs, waitMs);
    },
    // Handle a frame as if the server had sent it (tests of the frame logic).
    receive: function (frame) {
      onFrame(frame);
    },
    state: function () {
      return {
        lastSeq: state.lastSeq,
        connected: state.connected,
        reconnects: state.reconnects,
        streamStep: state.stream ? state.stream.step : null,
        streamText: state.stream ? state.stream.text : null,
        status: state.status,
        typing: state.typing,
      };
    },
  };

  formatTimes(log);
  placeDaySeparators();
  if (PERSON_HAS_IT[state.status]) personTookIt(); // opened while a person has it: no answer begun before
  renderStatus();
  scroller.scrollTop = scroller.scrollHeight;
  window.sessionStorage.removeItem("new-ticket-sent"); // the ticket it was for is made (new_ticket.js)
  var signedOutWords = window.sessionStorage.getItem(UNSENT_KEY);
  var unsent = [signedOutWords, takeDraft()].filter(Boolean).join("\n\n");
  if (unsent && !input.disabled) {
    window.sessionStorage.removeItem(UNSENT_KEY);
    input.value = unsent;
    autosize();
    note.textContent = signedOutWords
      ? "The message you wrote before you were signed out is back in the box: press Send to send it."
      : "What you were writing is back in the box.";
  } else if (unsent) {
    // Closed while they were signed out: no box to put it back in. It joins the messages the close kept
    // from reaching us, shown with a way to a new ticket (sendKeptMessages).
    try {
      var keptSends = JSON.parse(window.sessionStorage.getItem(PENDING_KEY) || "{}") || {};
      keptSends[newClientMsgId()] = unsent;
      window.sessionStorage.setItem(PENDING_KEY, JSON.stringify(keptSends));
      window.sessionStorage.removeItem(UNSENT_KEY);
    } catch (e) {
      /* storage full or off: it stays where it was */
    }
  }
  if (!input.disabled && attach()) {
    attach()
      .restore()
      .then(function (count) {
        if (!count) return;
        note.textContent =
          "The message you wrote before you were signed out is back in the box with its " +
          (count === 1 ? "file" : count + " files") + ": press Send to send it.";
      });
  }
  sendKeptMessages(); // on a closed ticket: shown, not sent (markClosed)
  // Ready to type on open; not on a touch screen, where focus would open the keyboard over the conversation.
  if (!input.disabled && !window.matchMedia("(pointer: coarse)").matches) input.focus();
  connect();
})();
