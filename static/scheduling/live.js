// Live pages: poll the small /live/ token; when it moves, fetch this page again and replace
// only the blocks of <main id="live"> whose HTML changed. What the user is doing survives:
// forms are never replaced (typed filter text, focus, selections), a block holding the focus
// waits for the next change, and every <details> keeps the open state the user gave it
// (matched by id, else by its position in the block). Scroll stays: unchanged blocks stay.
// Written for hamiadmin; no library.
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

  function detailsKey(element, position) {
    return element.id ? "#" + element.id : "@" + position;
  }

  function openStates(block) {
    var states = {};
    var all = block.tagName === "DETAILS" ? [block] : block.querySelectorAll("details");
    Array.prototype.forEach.call(all, function (element, position) {
      states[detailsKey(element, position)] = element.open;
    });
    return states;
  }

  function restoreOpen(block, states) {
    var all = block.tagName === "DETAILS" ? [block] : block.querySelectorAll("details");
    Array.prototype.forEach.call(all, function (element, position) {
      var key = detailsKey(element, position);
      if (Object.prototype.hasOwnProperty.call(states, key)) element.open = states[key];
    });
  }

  function keep(block) {
    return block.tagName === "FORM" || block.contains(document.activeElement);
  }

  // Replace the changed children of `current` with those of `fresh`, block by block.
  function patch(current, fresh) {
    var old = Array.prototype.slice.call(current.children);
    var next = Array.prototype.slice.call(fresh.children);
    var changed = 0;
    if (old.length !== next.length) {
      // A block appeared or went: rebuild in order, moving the user's forms over as they are.
      var forms = old.filter(function (block) { return block.tagName === "FORM"; });
      old.forEach(function (block) {
        if (block.tagName !== "FORM") block.remove();
      });
      next.forEach(function (block) {
        var form = block.tagName === "FORM" ? forms.shift() : null;
        current.appendChild(form || document.importNode(block, true));
      });
      return next.length;
    }
    next.forEach(function (block, position) {
      var mine = old[position];
      if (mine.outerHTML === block.outerHTML || keep(mine)) return;
      var states = openStates(mine);
      var fresh = document.importNode(block, true);
      mine.replaceWith(fresh);
      restoreOpen(fresh, states);
      changed += 1;
    });
    return changed;
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
        var changed = patch(main, fresh);
        version = fresh.dataset.version || version;
        main.dataset.version = version;
        document.dispatchEvent(new CustomEvent("live:updated", { detail: { blocks: changed } }));
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
