// Live pages: poll the small /live/ token; when it moves, fetch this page again and swap
// its <main id="live"> in place, so a pod turning scheduled shows without a reload.
(function () {
  "use strict";
  var main = document.getElementById("live");
  if (!main || !main.dataset.live) return;
  var state = document.getElementById("live-state");
  var version = main.dataset.version || "";
  var interval = parseInt(main.dataset.interval || "2000", 10);
  var busy = false;

  function show(text, cls) {
    if (!state) return;
    state.textContent = text;
    state.className = "live-state " + (cls || "");
  }

  function swap() {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) throw new Error("no live content (signed out?)");
        main.innerHTML = fresh.innerHTML;
        version = fresh.dataset.version || version;
        main.dataset.version = version;
        document.dispatchEvent(new CustomEvent("live:updated"));
      });
  }

  function poll() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(main.dataset.live, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (body) {
        if (body.version === version) return null;
        return swap();
      })
      .then(function () {
        show("live · " + new Date().toLocaleTimeString(), "ok");
      })
      .catch(function (error) {
        show("not updating: " + error.message, "bad");
      })
      .then(function () {
        busy = false;
      });
  }

  show("live", "ok");
  window.setInterval(poll, interval);
  document.addEventListener("visibilitychange", poll);
})();
