// Live approval dashboard: a WebSocket says "something changed"; the list is then
// reloaded from the server, which reads the ledger. No state lives in the page.
(function () {
  "use strict";
  var container = document.getElementById("pending");
  var status = document.getElementById("live-status");
  if (!container) return;
  var delay = 500;

  function refresh() {
    fetch(container.dataset.fragmentUrl, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { container.innerHTML = html; })  // server-rendered, escaped by Django
      .catch(function () { status.textContent = "Could not refresh the list; retrying…"; });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/staff/approvals/");
    socket.onopen = function () { delay = 500; status.textContent = "Live: new requests appear here automatically."; refresh(); };
    socket.onmessage = function () { refresh(); };
    socket.onclose = function () {
      status.textContent = "Reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
