// The board's only script (a static file: the Content-Security-Policy allows no inline code).
// Everything works without it; it adds the viewer's local time beside server-rendered
// instants, returns focus to the control a redirect names (#edit-policy), and keeps the
// header counts and chips live over Server-Sent Events.
(function () {
  "use strict";

  var format = new Intl.DateTimeFormat(undefined, {
    weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
    timeZoneName: "short"
  });

  function localTimes(root) {
    var times = root.querySelectorAll("time[data-local]");
    for (var i = 0; i < times.length; i++) {
      var el = times[i];
      if (el.nextElementSibling && el.nextElementSibling.classList.contains("local")) continue;
      var at = new Date(el.getAttribute("datetime"));
      if (isNaN(at.getTime())) continue;
      var span = document.createElement("span");
      span.className = "local";
      span.textContent = " (your time: " + format.format(at) + ")";
      el.insertAdjacentElement("afterend", span);
    }
  }

  function focusTarget() {
    if (!location.hash) return;
    var el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el) el.focus();
  }

  function live(url) {
    if (!window.EventSource) return;
    var source = new EventSource(url);
    var announce = document.getElementById("announce");
    source.addEventListener("fragment", function (e) {
      var msg = JSON.parse(e.data);
      var el = document.getElementById(msg.id);
      if (!el) return;
      el.innerHTML = msg.html;
      localTimes(el);
    });
    source.addEventListener("announce", function (e) {
      if (announce) announce.textContent = JSON.parse(e.data).text;
    });
    source.addEventListener("end", function () { source.close(); });
    document.body.setAttribute("data-live", "connected");
  }

  function start() {
    localTimes(document);
    focusTarget();
    var url = document.body.getAttribute("data-events");
    if (url) live(url);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
