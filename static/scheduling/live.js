// Live pages: poll the small /live/ token; when it moves, ask this page for what changed
// since the version shown (X-Live: 1, X-Live-Since): a small JSON of the blocks of
// <main id="live"> and the rows of their [data-live-rows] containers that differ
// (scheduling/web/live.py), never the whole page again while the tab holds it. Should the
// answer not fit what the tab shows, the page is fetched whole once. What the user is doing survives:
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

  // Whether every block shows what the server sent at `version` (a kept form or focused block
  // does not): only then may the next answer leave blocks out.
  var whole = false;
  // This tab's own name, so the server compares with what it sent this tab, not another.
  var tab = Math.random().toString(36).slice(2, 12);

  function fragment(html) {
    var template = document.createElement("template");
    template.innerHTML = html;
    return template.content.firstElementChild;
  }

  // True when the block now shows `html`, or is a form (forms are the user's: never replaced,
  // and the server's copy differs only by what the user typed); false when kept for the focus.
  function replaceBlock(mine, html) {
    if (mine.tagName === "FORM") return true;
    if (keep(mine)) return false;
    var states = openStates(mine);
    var fresh = fragment(html);
    if (!fresh) return false;
    mine.replaceWith(fresh);
    restoreOpen(fresh, states);
    return true;
  }

  function replaceRows(block, rows) {
    if (keep(block)) return false;
    var containers = block.querySelectorAll("[data-live-rows]");
    rows.forEach(function (change) {
      var container = containers[change[0]];
      var row = container && container.children[change[1]];
      var fresh = row && fragment(change[2]);
      if (!fresh) throw new Error("rows out of step");
      var states = openStates(row);
      row.replaceWith(fresh);
      restoreOpen(fresh, states);
    });
    return true;
  }

  // Apply a JSON answer; false when it does not fit the page shown (then fetch it whole).
  function apply(body) {
    var blocks = body.blocks;
    if (!blocks || blocks.length !== main.children.length) return false;
    var current = Array.prototype.slice.call(main.children);
    var complete = true, changed = 0;
    blocks.forEach(function (part, position) {
      if (part === null) return;
      var done = part.rows ? replaceRows(current[position], part.rows) : replaceBlock(current[position], part.html);
      if (done) changed += 1; else complete = false;
    });
    version = body.version;
    main.dataset.version = version;
    whole = complete;
    document.dispatchEvent(new CustomEvent("live:updated", { detail: { blocks: changed } }));
    return true;
  }

  function parts() {
    var headers = { "X-Live": "1", "X-Live-Tab": tab, Accept: "application/json" };
    if (whole) headers["X-Live-Since"] = version;
    return fetch(window.location.href, { credentials: "same-origin", headers: headers })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        var type = response.headers.get("Content-Type") || "";
        if (type.indexOf("application/json") !== 0) throw new Error("no live content (signed out?)");
        return response.json();
      })
      .then(function (body) {
        var fits = false;
        try { fits = apply(body); } catch (error) { fits = false; }
        if (!fits) return swap();
        return null;
      });
  }

  function swap() {
    whole = false;
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
        return parts();
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
