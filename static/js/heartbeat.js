/*
 * A socket can stop carrying anything without closing: a laptop or a phone that changed networks
 * leaves a half-open connection the browser may not see end for many minutes, while what happens
 * meanwhile never reaches the page and the page still looks live. Every live page (the chat, the
 * staff conversation, the approval dashboard) watches its socket here: quiet for quietMs, the socket
 * is asked for a pong (every socket answers a ping: support/websocket.py); nothing back within
 * pongWaitMs, it is closed and given up, and the page opens a new one, whose catch-up brings what the
 * old one missed.
 */
(function () {
  "use strict";

  var waits = { quietMs: 25000, pongWaitMs: 10000 };

  // Watch `socket` until it closes or is given up. `giveUp` is called once the socket is given up
  // (closed by this script): the page opens a new one then, not at the close event, which a dead
  // connection may bring many minutes later, if ever; the page ignores that socket from then on.
  function watch(socket, giveUp) {
    var lastHeard = Date.now();
    var askedAt = null;
    function heard() {
      lastHeard = Date.now();
    }
    socket.addEventListener("open", heard);
    socket.addEventListener("message", heard);
    (function check() {
      if (socket.readyState === WebSocket.CLOSING || socket.readyState === WebSocket.CLOSED) return;
      var now = Date.now();
      if (socket.readyState === WebSocket.OPEN) {
        if (askedAt !== null && lastHeard < askedAt) {
          if (now - askedAt >= waits.pongWaitMs) {
            socket.close();
            giveUp();
            return;
          }
        } else if (now - lastHeard >= waits.quietMs) {
          askedAt = now;
          socket.send(JSON.stringify({ type: "ping" }));
        } else {
          askedAt = null;
        }
      }
      setTimeout(check, Math.min(waits.quietMs, waits.pongWaitMs) / 4);
    })();
  }

  window.heartbeat = {
    watch: watch,
    // Ask a socket quiet for quietMs for a pong, and give it up after pongWaitMs without one (tests of
    // a socket that stops carrying anything without closing); from each socket's next check on.
    waits: function (quietMs, pongWaitMs) {
      waits.quietMs = quietMs;
      waits.pongWaitMs = pongWaitMs;
    },
  };
})();
