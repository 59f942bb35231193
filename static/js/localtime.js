// Times on staff pages in the reader's own zone. The server writes each one in its own zone, with the
// zone ("2026-12-05 21:05:53 UTC"), in a <time datetime> element (tickets/templatetags/times.py);
// here it is shown as the browser's clock reads it ("2026-12-06 06:05:53 GMT+9"), the server's words
// kept as its tooltip. Times the page adds later (the live timeline, a card read again) too.
(function () {
  "use strict";
  var parts = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZoneName: "short" };
  var format;
  try {
    format = new Intl.DateTimeFormat("en-US", parts);
  } catch (e) {
    return; // no Intl: the server's time, with its zone, stays
  }

  function shown(date, timeOnly) {
    var p = {};
    format.formatToParts(date).forEach(function (part) { p[part.type] = part.value; });
    var clock = p.hour + ":" + p.minute + ":" + p.second + " " + p.timeZoneName;
    return timeOnly ? clock : p.year + "-" + p.month + "-" + p.day + " " + clock;
  }

  function localise(root) {
    var times = root.querySelectorAll ? root.querySelectorAll("time[data-local][datetime]") : [];
    Array.prototype.forEach.call(times, function (el) {
      if (el.dataset.localised) return;
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      el.title = el.textContent;
      el.textContent = shown(date, el.dataset.local === "time");
      el.dataset.localised = "1";
    });
  }

  // For a page that compares a fresh copy with what it shows (approvals.js): shown the same way first.
  window.localTimes = localise;
  localise(document);
  new MutationObserver(function (changes) {
    changes.forEach(function (change) {
      Array.prototype.forEach.call(change.addedNodes, function (node) {
        if (node.nodeType !== 1) return;
        if (node.matches("time[data-local][datetime]")) localise(node.parentNode || node);
        else localise(node);
      });
    });
  }).observe(document.body, { childList: true, subtree: true });
})();
