// Live approval dashboard. A WebSocket says "something changed"; the pending list is then
// read again from the server (which reads the ledger) and merged into the page card by card:
// a card the person is working in is never replaced, so a typed reason, an opened
// conversation and keyboard focus survive. New cards are inserted and announced. A typed note or
// reason is also kept in the tab until its request is no longer pending (keepDraft, below). A socket
// gone silent without closing is given up and opened again (static/js/heartbeat.js).
(function () {
  "use strict";
  var container = document.getElementById("pending");
  var status = document.getElementById("live-status");
  var banner = document.getElementById("new-banner");
  var showNew = document.getElementById("new-banner-show");
  if (!container) return;
  var list = container.querySelector(".approval-list");
  var empty = container.querySelector(".empty");
  var delay = 500;
  var lastChange = {}; // approval id -> the last decision the socket reported for it
  var newIds = [];
  var loading = false;
  var again = false;
  var listening = false; // the socket is in the staff group: a change rings it
  var denied = false;
  var retryDelay = 1000;
  var retryTimer = null;
  var socket = null; // the one the page listens to: one given up may still bring a frame, or its close

  function cardsIn(root) {
    return Array.prototype.slice.call(root.querySelectorAll("li.approval[data-approval-id]"));
  }

  function cardById(id) {
    return cardsIn(list).filter(function (card) { return card.dataset.approvalId === id; })[0] || null;
  }

  // Is the person doing something in this card? Then it must not move or disappear.
  function busy(card) {
    if (card.contains(document.activeElement)) return true;
    if (card.querySelector("details[open]")) return true;
    if (card.querySelector("input[type=checkbox]:checked")) return true;
    return Array.prototype.some.call(card.querySelectorAll("input[type=text], textarea"), function (field) {
      return field.value.trim() !== "";
    });
  }

  // Refresh the parts of a kept card that only show facts (waiting time, warnings, conversation).
  function refreshParts(card, fresh) {
    if (window.localTimes) window.localTimes(fresh); // its times as the card shows them (localtime.js)
    Array.prototype.forEach.call(fresh.querySelectorAll("[data-live]"), function (part) {
      var target = card.querySelector('[data-live="' + part.dataset.live + '"]');
      if (!target || target.innerHTML === part.innerHTML || target.contains(document.activeElement)) return;
      target.innerHTML = part.innerHTML; // server-rendered, escaped by Django
    });
  }

  // Decided elsewhere (or expired) while this person works in the card: say so, keep what they typed.
  function markGone(card) {
    if (card.classList.contains("gone")) return;
    var change = lastChange[card.dataset.approvalId];
    var what = change === "expired" ? "expired"
      : change === "withdrawn" ? "withdrawn: the agent stopped waiting for it (a person has the ticket, or it ended)"
      : change === "approved" || change === "rejected" ? change + " by someone else"
      : "decided by someone else";
    card.classList.add("gone");
    card.querySelector(".gone-notice").textContent =
      "No longer pending: this request was " + what + ". Nothing you typed here was sent.";
    card.querySelector("[data-action=dismiss]").hidden = false;
    var badge = card.querySelector("[data-state]");
    badge.textContent = "no longer pending";
    badge.className = "badge gone";
    // aria-disabled rather than disabled: disabling a focused button would drop the focus.
    Array.prototype.forEach.call(card.querySelectorAll(".decide button"), function (button) {
      button.setAttribute("aria-disabled", "true");
    });
  }

  // What a person types in a card's note or reason is kept in this tab, by person, request and form,
  // as they type and when they send it. A decision that did not go through (the page was older than
  // their sign-in: they signed in again in another tab, or the session ended; the product's page says
  // nothing was done) loses nothing: back on the dashboard, the words are in the card's box again,
  // not sent. Dropped once the request is no longer pending (its card leaves the list).
  var draftPrefix = "approval-draft-" + (container.dataset.user || "") + "-";

  function draftKey(id, form) {
    return draftPrefix + id + "-" + (form.classList.contains("approve") ? "approve" : "reject");
  }

  function keepDraft(form) {
    var card = form.closest("li.approval");
    var field = form.querySelector("input[name=note]");
    if (!card || !field || card.classList.contains("gone")) return;
    try {
      var key = draftKey(card.dataset.approvalId, form);
      if (field.value.trim()) window.sessionStorage.setItem(key, field.value);
      else window.sessionStorage.removeItem(key);
    } catch (e) {
      /* storage off: the form still goes */
    }
  }

  function restoreDrafts(card) {
    Array.prototype.forEach.call(card.querySelectorAll(".decide form"), function (form) {
      var field = form.querySelector("input[name=note]");
      if (!field || field.value.trim()) return;
      var kept = null;
      try {
        kept = window.sessionStorage.getItem(draftKey(card.dataset.approvalId, form));
      } catch (e) {
        kept = null;
      }
      if (!kept || !kept.trim()) return;
      field.value = kept;
      var note = document.createElement("p");
      note.className = "muted kept";
      note.id = field.id + "-kept";
      note.setAttribute("role", "status");
      note.textContent = "What you typed here is back in the box, not sent yet: press " +
        form.querySelector("button[type=submit]").textContent + " to send it.";
      form.insertAdjacentElement("afterbegin", note);
    });
  }

  // Drafts of requests not pending on the page (decided, expired, withdrawn) are dropped.
  function dropDrafts() {
    var pending = {};
    cardsIn(list).forEach(function (card) {
      if (!card.classList.contains("gone")) pending[card.dataset.approvalId] = true;
    });
    try {
      var stale = [];
      for (var i = 0; i < window.sessionStorage.length; i++) {
        var key = window.sessionStorage.key(i);
        if (key && key.indexOf(draftPrefix) === 0 && !pending[key.slice(draftPrefix.length).split("-")[0]]) {
          stale.push(key);
        }
      }
      stale.forEach(function (key) { window.sessionStorage.removeItem(key); });
    } catch (e) {
      /* storage off: nothing was kept */
    }
  }

  function announce() {
    newIds = newIds.filter(cardById);
    banner.textContent = newIds.length
      ? newIds.length + " new request" + (newIds.length === 1 ? "" : "s") + " added below."
      : "";
    showNew.hidden = newIds.length === 0;
  }

  function merge(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    var wanted = {};
    // Past its expiry, though the sweeper has not marked it yet (so the socket has not said so).
    var expired = fresh.querySelector(".past-expiry");
    (expired ? expired.dataset.ids.split(" ") : []).forEach(function (id) {
      if (id && !lastChange[id]) lastChange[id] = "expired";
    });
    // Its ticket taken by a person since the agent asked: the agent withdraws it (a decision is refused).
    var taken = fresh.querySelector(".person-took");
    (taken ? taken.dataset.ids.split(" ") : []).forEach(function (id) {
      if (id && !lastChange[id]) lastChange[id] = "withdrawn";
    });
    var previous = null;
    cardsIn(fresh).forEach(function (card) {
      var id = card.dataset.approvalId;
      wanted[id] = true;
      var kept = cardById(id);
      if (kept) {
        refreshParts(kept, card);
        previous = kept;
        return;
      }
      var added = document.importNode(card, true);
      restoreDrafts(added);
      added.classList.add("is-new");
      added.querySelector("[data-state]").insertAdjacentHTML("beforebegin", '<span class="badge new">new</span>');
      if (previous) previous.after(added); else list.prepend(added);
      previous = added;
      newIds.push(id);
    });
    cardsIn(list).forEach(function (card) {
      if (wanted[card.dataset.approvalId] || card.classList.contains("gone")) return;
      if (busy(card)) markGone(card); else card.remove();
    });
    dropDrafts();
    empty.hidden = cardsIn(list).length > 0;
    var more = container.querySelector(".more"), freshMore = fresh.querySelector(".more");
    if (more && freshMore) {
      more.textContent = freshMore.textContent;
      more.hidden = freshMore.hidden;
    }
    announce();
  }

  // A read that failed (a server error, a dropped connection) is made again, with a growing pause:
  // the change it answered will not ring again, so waiting for the next one could be waiting for ever.
  function retryLater() {
    if (denied || retryTimer !== null) return;
    retryTimer = setTimeout(function () { retryTimer = null; refresh(); }, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 10000);
  }

  function refresh() {
    if (loading) { again = true; return; } // one request at a time; the last word wins
    loading = true;
    fetch(container.dataset.fragmentUrl, { credentials: "same-origin" })
      .then(function (r) {
        // Signed out meanwhile (a session that expired tells the socket nothing), the list's address
        // leads to the sign-in page: that is no list, and every card would have read as decided.
        if (r.redirected) signedOut();
        return r.ok && !r.redirected ? r.text() : Promise.reject(r.status);
      })
      .then(function (html) {
        merge(html);
        retryDelay = 1000;
        if (listening) status.textContent = LIVE;
      })
      .catch(function () {
        if (denied) return;
        status.textContent = "Could not refresh the list; retrying…";
        retryLater();
      })
      .then(function () {
        loading = false;
        if (again) { again = false; refresh(); }
      });
  }

  container.addEventListener("click", function (event) {
    var dismiss = event.target.closest("[data-action=dismiss]");
    if (!dismiss) return;
    dismiss.closest("li.approval").remove();
    empty.hidden = cardsIn(list).length > 0;
  });
  container.addEventListener("submit", function (event) {
    var card = event.target.closest("li.approval");
    if (card && card.classList.contains("gone")) {
      event.preventDefault();
      card.querySelector(".gone-notice").focus();
      return;
    }
    if (card) keepDraft(event.target);
  });
  container.addEventListener("input", function (event) {
    var form = event.target.closest(".decide form");
    if (form && event.target.name === "note") keepDraft(form);
  });
  showNew.addEventListener("click", function () {
    var first = newIds.length ? cardById(newIds[0]) : null;
    newIds = [];
    announce();
    if (first) {
      var title = first.querySelector("h2");
      title.scrollIntoView({ block: "start" });
      title.focus();
    }
  });

  var LIVE = "Live: new requests appear here automatically.";
  var signedOutSaid = false;

  function signedOut() {
    denied = true;
    signedOutSaid = true;
    status.textContent = "You were signed out: sign in again to see the list as it is now.";
  }

  function reconnectLater(wait) {
    socket = null;
    listening = false;
    status.textContent = "Reconnecting…";
    setTimeout(connect, wait);
    delay = Math.min(delay * 2, 10000);
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var own = new WebSocket(scheme + location.host + "/ws/staff/approvals/");
    socket = own;
    own.onmessage = function (event) {
      if (socket !== own) return;
      try {
        var message = JSON.parse(event.data);
        if (message.type === "pong") return; // the heartbeat's answer: nothing changed
        if (message.type === "ready") {
          // In the staff group now: catch up on what changed while disconnected (or connecting).
          delay = 500;
          listening = true;
          status.textContent = LIVE;
        }
        if (["approved", "rejected", "expired", "withdrawn"].indexOf(message.change) >= 0) {
          lastChange[String(message.approval_id)] = message.change;
        }
      } catch (ignored) { /* any message means "read the list again" */ }
      refresh();
    };
    own.onclose = function (event) {
      if (socket !== own) return;
      listening = false;
      // 4403: signed out or not an approver (any more): reconnecting would be refused again.
      if (event.code === 4403) {
        denied = true;
        if (!signedOutSaid) status.textContent = "Not allowed: sign in again to see live updates.";
        // Refused after a sign-in that ended (expired, cleared: the socket learns it at a check, then
        // its reconnect is refused): one read of the list tells which, a sign-in page says so.
        refresh();
        return;
      }
      reconnectLater(event.code === 4401 ? 0 : delay); // 4401: the sign-in changed; try at once
    };
    // Gone silent without closing: a new socket's "ready" reads the list again.
    window.heartbeat.watch(own, function () {
      if (socket === own) reconnectLater(delay);
    });
  }
  cardsIn(list).forEach(restoreDrafts);
  dropDrafts();
  connect();
})();
