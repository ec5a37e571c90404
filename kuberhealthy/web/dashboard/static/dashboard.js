/* Kuberhealthy dashboard: keeps a server-rendered page current without reloading it.
 *
 * The page works without this script. With it:
 *  - times ("2 min ago", "in 40 s") tick every second (the rules of web/dashview.py relative/countdown);
 *  - every few seconds it asks the page's live URL what changed since the token it holds, sending the
 *    token as If-None-Match: nothing changed -> 304, no body; otherwise the server sends only the
 *    changed rows (overview) or the changed parts (check page), rendered by the same templates as the
 *    page, and they are swapped in place (one DOM change per row, so nothing flickers);
 *  - it stops asking while the tab is hidden and asks at once when it is shown again;
 *  - the overview's filter applies as you type and is kept in the URL (?q=&ns=&state=), as the
 *    server-side filter reads it, so a link shares it;
 *  - the check page's "Run now" posts to the run-now API and says politely what happened.
 * No libraries, nothing loaded from elsewhere.
 */
(function () {
  "use strict";

  var main = document.getElementById("main");
  if (!main || !main.dataset.live) { return; }
  var page = main.dataset.page;
  var liveUrl = main.dataset.live;
  var token = main.dataset.token || "";
  var pollMs = Number(main.dataset.poll) || 5000;
  var skew = (Number(main.dataset.now) || Date.now()) - Date.now(); // server clock minus ours
  var timer = 0;
  var failures = 0;
  var fastUntil = 0;

  function now() { return Date.now() + skew; }

  // --- times -------------------------------------------------------------------------------------------
  function unit(s) {
    s = Math.floor(s);
    if (s < 60) { return s + " s"; }
    if (s < 3600) { return Math.floor(s / 60) + " min"; }
    if (s < 86400) { return Math.floor(s / 3600) + " h"; }
    return Math.floor(s / 86400) + " d";
  }
  function ago(t, n) {
    var age = (n - t) / 1000;
    if (age < 5) { return age > -5 ? "just now" : "in " + unit(-age); }
    return unit(age) + " ago";
  }
  function until(t, n) {
    var left = (t - n) / 1000;
    if (left < 1) { return "due now"; }
    var s = Math.floor(left);
    if (s >= 60 && s < 600) { return "in " + Math.floor(s / 60) + " min " + (s % 60) + " s"; }
    return "in " + unit(s);
  }
  function tick() {
    if (document.hidden) { return; }
    var n = now();
    var els = document.querySelectorAll("time[data-rel]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (el.khT === undefined) { el.khT = Date.parse(el.getAttribute("datetime")); }
      if (isNaN(el.khT)) { continue; }
      var text = el.dataset.rel === "in" ? until(el.khT, n) : ago(el.khT, n);
      if (el.textContent !== text) { el.textContent = text; }
    }
  }
  document.addEventListener("mouseover", function (ev) {
    var el = ev.target;
    if (el && el.tagName === "TIME" && !el.title) { el.title = el.getAttribute("datetime"); }
  });

  // --- polling -----------------------------------------------------------------------------------------
  var conn = document.getElementById("conn");
  function connected(ok) { if (conn) { conn.hidden = ok; } }

  function schedule() {
    clearTimeout(timer);
    if (document.hidden) { return; }
    var wait = Date.now() < fastUntil ? 1000 : pollMs * Math.min(6, Math.pow(2, failures));
    timer = setTimeout(refresh, wait);
  }

  function refresh() {
    clearTimeout(timer);
    if (!liveUrl) { return; }
    var url = liveUrl + (page === "overview" && token ? "?since=" + encodeURIComponent(token) : "");
    var headers = { "Accept": "application/json" };
    if (token) { headers["If-None-Match"] = "\"" + token + "\""; }
    fetch(url, { headers: headers, cache: "no-store", credentials: "same-origin" }).then(function (r) {
      if (r.status === 304) { return null; }
      if (r.status === 404 && page === "check") { gone(); return null; }
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.json();
    }).then(function (d) {
      failures = 0;
      connected(true);
      if (d) {
        skew = d.nowMs - Date.now();
        if (page === "overview") { applyOverview(d); } else { applyCheck(d); }
        token = d.token;
      }
      var updated = document.getElementById("updated");
      if (updated) { updated.setAttribute("datetime", new Date(now()).toISOString()); updated.khT = undefined; }
      tick();
      schedule();
    }).catch(function () {
      failures += 1;
      connected(false);
      schedule();
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { clearTimeout(timer); } else { tick(); refresh(); }
  });

  // --- the overview ------------------------------------------------------------------------------------
  var table = document.getElementById("checks");
  var fq = document.getElementById("f-q");
  var fns = document.getElementById("f-ns");
  var fst = document.getElementById("f-state");

  function currentFilter() {
    return { q: fq ? fq.value.trim().toLowerCase() : "", ns: fns ? fns.value : "", st: fst ? fst.value : "" };
  }
  // A row's id is "<kind>:<namespace>/<name>"; its namespace, sort key and search text come from it.
  function rowNs(tr) { var id = tr.dataset.id; return id.slice(id.indexOf(":") + 1, id.indexOf("/")); }
  function sortKey(tr) {
    var id = tr.dataset.id;
    return id.slice(id.indexOf("/") + 1) + " " + id.slice(0, id.indexOf(":"));
  }
  function searchText(tr) { var id = tr.dataset.id; return tr.dataset.q || id.slice(id.indexOf(":") + 1) + " "; }
  function matches(tr, f) {
    return (!f.ns || rowNs(tr) === f.ns) && (!f.st || tr.dataset.st === f.st) &&
      (!f.q || searchText(tr).indexOf(f.q) >= 0);
  }
  function groups() { return Array.prototype.slice.call(table.tBodies); }
  function rowsOf(tbody) { return Array.prototype.slice.call(tbody.querySelectorAll("tr[data-id]")); }

  function countText(n, failing) {
    return n + " check" + (n !== 1 ? "s" : "") + (failing ? ", " + failing + " failing" : "");
  }
  function failingIn(tbody) {
    return rowsOf(tbody).filter(function (tr) { return tr.dataset.st === "failing"; }).length;
  }
  function compareRows(a, b) {
    var ra = Number(a.dataset.r), rb = Number(b.dataset.r);
    if (ra !== rb) { return ra - rb; }
    var sa = sortKey(a), sb = sortKey(b);
    return sa < sb ? -1 : (sa > sb ? 1 : 0);
  }
  function reorder(parent, nodes, compare) {
    var sorted = nodes.slice().sort(compare);
    for (var i = 0; i < sorted.length; i++) {
      if (sorted[i] !== nodes[i]) { sorted.forEach(function (n) { parent.appendChild(n); }); return; }
    }
  }
  function tidyGroup(tbody) {
    var rows = rowsOf(tbody);
    if (!rows.length) { tbody.remove(); return; }
    reorder(tbody, rows, compareRows);
    var cnt = tbody.querySelector(".grp .cnt");
    if (cnt) { cnt.textContent = countText(rows.length, failingIn(tbody)); }
  }
  function tidyGroups() {
    reorder(table, groups(), function (a, b) {
      var fa = failingIn(a) ? 0 : 1, fb = failingIn(b) ? 0 : 1;
      if (fa !== fb) { return fa - fb; }
      return a.dataset.ns < b.dataset.ns ? -1 : (a.dataset.ns > b.dataset.ns ? 1 : 0);
    });
  }
  function groupFor(ns) {
    var found = groups().filter(function (g) { return g.dataset.ns === ns; })[0];
    if (found) { return found; }
    var tpl = document.getElementById("group-template");
    var tbody = tpl.content.firstElementChild.cloneNode(true);
    tbody.dataset.ns = ns;
    tbody.querySelector(".ns").textContent = ns;
    table.appendChild(tbody);
    if (fns && !Array.prototype.some.call(fns.options, function (o) { return o.value === ns; })) {
      var opt = document.createElement("option");
      opt.value = ns;
      opt.textContent = ns;
      var before = Array.prototype.filter.call(fns.options, function (o) { return o.value && o.value > ns; })[0];
      fns.insertBefore(opt, before || null);
    }
    return tbody;
  }

  function applyFilter(updateUrl) {
    if (!table) { return; }
    var f = currentFilter();
    var shown = 0, total = 0;
    groups().forEach(function (tbody) {
      var visible = 0;
      rowsOf(tbody).forEach(function (tr) {
        var ok = matches(tr, f);
        if (tr.hidden === ok) { tr.hidden = !ok; }
        total += 1;
        if (ok) { visible += 1; }
      });
      shown += visible;
      if (tbody.hidden !== !visible) { tbody.hidden = !visible; }
    });
    var count = document.getElementById("f-count");
    var text = "Showing " + shown + " of " + total;
    if (count && count.textContent !== text) { count.textContent = text; }
    var empty = document.getElementById("empty");
    if (empty) {
      empty.hidden = shown > 0;
      empty.textContent = total ? "No checks match this filter." : "No khchecks, khjobs or HealthChecks yet.";
    }
    if (updateUrl) {
      var params = new URLSearchParams();
      if (fq && fq.value.trim()) { params.set("q", fq.value.trim()); }
      if (f.ns) { params.set("ns", f.ns); }
      if (f.st) { params.set("state", f.st); }
      var qs = params.toString();
      history.replaceState(null, "", location.pathname + (qs ? "?" + qs : ""));
    }
  }

  function banner(b) {
    var section = document.getElementById("banner");
    if (!section) { return; }
    section.className = "banner " + (b.healthy ? "good" : "bad");
    section.querySelector(".icon").textContent = b.healthy ? "\u2713" : "\u2717";
    var set = function (id, text) {
      var el = document.getElementById(id);
      if (el && el.textContent !== text) { el.textContent = text; }
    };
    set("headline", b.headline);
    set("master", b.master);
    set("running", b.running + " running");
    document.title = b.headline + " \u00b7 Kuberhealthy";
  }

  function applyOverview(d) {
    var have = {};
    rowsOf(table).forEach(function (tr) { have[tr.dataset.id] = tr; });
    var touched = [];
    var drop = function (id) {
      var tr = have[id];
      if (!tr) { return; }
      touched.push(tr.parentNode);
      tr.remove();
      delete have[id];
    };
    if (d.full) {
      var keep = {};
      d.rows.forEach(function (r) { keep[r.id] = true; });
      Object.keys(have).forEach(function (id) { if (!keep[id]) { drop(id); } });
    }
    d.removed.forEach(drop);
    var tpl = document.createElement("template");
    var f = currentFilter();
    d.rows.forEach(function (r) {
      tpl.innerHTML = r.html;
      var tr = tpl.content.firstElementChild;
      tr.hidden = !matches(tr, f);
      var old = have[r.id];
      if (old && rowNs(old) === r.ns) {
        var focused = old.contains(document.activeElement);
        old.replaceWith(tr);
        if (focused) { var link = tr.querySelector("a"); if (link) { link.focus(); } }
      } else {
        if (old) { touched.push(old.parentNode); old.remove(); }
        groupFor(r.ns).appendChild(tr);
      }
      touched.push(tr.parentNode);
    });
    touched.filter(function (g, i) { return g && touched.indexOf(g) === i; }).forEach(tidyGroup);
    tidyGroups();
    banner(d.banner);
    applyFilter(false);
  }

  if (page === "overview" && table) {
    var debounce = 0;
    if (fq) {
      fq.addEventListener("input", function () {
        clearTimeout(debounce);
        debounce = setTimeout(function () { applyFilter(true); }, 120);
      });
    }
    [fns, fst].forEach(function (el) { if (el) { el.addEventListener("change", function () { applyFilter(true); }); } });
    var form = document.getElementById("filter");
    if (form) { form.addEventListener("submit", function (ev) { ev.preventDefault(); applyFilter(true); }); }
    var clear = document.getElementById("f-clear");
    if (clear) {
      clear.addEventListener("click", function (ev) {
        ev.preventDefault();
        if (fq) { fq.value = ""; }
        if (fns) { fns.value = ""; }
        if (fst) { fst.value = ""; }
        applyFilter(true);
        if (fq) { fq.focus(); }
      });
    }
  }

  // --- a check page ------------------------------------------------------------------------------------
  function gone() {
    var note = document.createElement("p");
    note.className = "empty";
    note.setAttribute("role", "status");
    note.textContent = "This check no longer exists; what is shown is its last known state.";
    main.insertBefore(note, main.children[1] || null);
    runButtons.forEach(function (btn) {
      var msg = document.getElementById(btn.dataset.msg);
      if (msg) { msg.textContent = ""; }
      btn.hidden = true;
    });
    liveUrl = "";
  }

  function applyCheck(d) {
    var ids = Object.keys(d.parts);
    var present = Array.prototype.map.call(document.querySelectorAll(".live-part"), function (el) { return el.id; });
    if (ids.length !== present.length || ids.some(function (id) { return present.indexOf(id) < 0; })) {
      location.reload(); // a khjob of the same name came or went: the page's outline changed
      return;
    }
    ids.forEach(function (id) {
      var el = document.getElementById(id);
      if (el.khHtml === d.parts[id]) { return; }
      var open = {};
      el.querySelectorAll("details[open]").forEach(function (x) { open[x.dataset.key] = true; });
      el.innerHTML = d.parts[id];
      el.khHtml = d.parts[id];
      el.querySelectorAll("details").forEach(function (x) { if (open[x.dataset.key]) { x.open = true; } });
    });
  }

  // One "Run now" per runnable entry (a khcheck and a HealthCheck of one name share a page); each says
  // what happened in its own message element (data-msg).
  var runButtons = Array.prototype.slice.call(document.querySelectorAll("button.run-now"));
  runButtons.forEach(function (runBtn) {
    var runMsg = document.getElementById(runBtn.dataset.msg);
    function say(text, bad) {
      if (!runMsg) { return; }
      runMsg.textContent = text;
      runMsg.className = "run-msg" + (bad ? " bad" : "");
    }
    runBtn.hidden = false;
    runBtn.addEventListener("click", function () {
      runBtn.disabled = true;
      say("Requesting a run\u2026", false);
      fetch(runBtn.dataset.url, { method: "POST", headers: { "Accept": "application/json" }, cache: "no-store",
                                  credentials: "same-origin" }).then(function (r) {
        if (r.status === 202) {
          say("Run requested. Its result appears below when it finishes.", false);
          fastUntil = Date.now() + 90000;
          refresh();
        } else if (r.status === 409) {
          say("A run is already in flight or waiting to start; its result will appear below.", false);
          fastUntil = Date.now() + 30000;
          refresh();
        } else if (r.status === 429) {
          say("Too many requests just now; try again in " + (r.headers.get("Retry-After") || "a few") + " s.", true);
        } else if (r.status === 404) {
          say("This server does not take run requests (enableRunAPI is off), or the check is gone.", true);
        } else if (r.status === 503) {
          say("The Kubernetes API is not reachable right now; try again shortly.", true);
        } else {
          say("Could not request a run (HTTP " + r.status + ").", true);
        }
      }).catch(function () {
        say("Could not reach the server.", true);
      }).then(function () { runBtn.disabled = false; });
    });
  });

  // --- start -------------------------------------------------------------------------------------------
  if (page === "check") {
    document.querySelectorAll(".live-part").forEach(function (el) { el.khHtml = null; });
  }
  tick();
  setInterval(tick, 1000);
  schedule();
}());
