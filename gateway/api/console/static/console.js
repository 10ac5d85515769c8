// tiered-gateway console: the one script, loaded in the head so that it also serves a search
// page that is still streaming. It reads only data-* attributes and the page's own elements;
// it never evaluates or inserts record contents as markup. Every page works without it.
"use strict";
(function () {
  var root = document.documentElement;
  root.classList.add("js");  // shows what needs the script (the Cancel button)

  // A running search: Cancel stops the load, which closes the connection (the server stops
  // reading); the status line follows the newest progress line.
  function statusLine() { return document.querySelector(".status"); }
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest ? event.target.closest("button.cancel") : null;
    if (!button) { return; }
    window.stop();
    var outputs = document.querySelectorAll("output.progress");
    var last = outputs.length ? outputs[outputs.length - 1] : null;
    var status = statusLine();
    if (status) {
      status.textContent = "Cancelled" + (last ? " at offset " + last.dataset.next : "") + ".";
      status.dataset.cancelled = "true";
    }
    button.hidden = true;
  });
  new MutationObserver(function () {
    var status = statusLine();
    if (!status || status.dataset.cancelled === "true") { return; }
    var outputs = document.querySelectorAll("output.progress");
    var text = outputs.length ? outputs[outputs.length - 1].textContent : "";
    if (text && status.textContent !== text) { status.textContent = text; }  // no change, no loop
    if (document.querySelector(".stopped")) {
      var button = document.querySelector("button.cancel");
      if (button && !button.hidden) { button.hidden = true; }
    }
  }).observe(root, { childList: true, subtree: true });

  // Keyboard: n / p page, / focuses the first search field.
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (target && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(target.tagName)) { return; }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var link = null;
    if (event.key === "n") { link = document.querySelector("a[rel=next]"); }
    if (event.key === "p") { link = document.querySelector("a[rel=prev]"); }
    if (link) { event.preventDefault(); window.location.assign(link.href); }
    if (event.key === "/") {
      var field = document.querySelector("form.search input");
      if (field) { event.preventDefault(); field.focus(); }
    }
  });

  // Time zone fields left at UTC suggest the browser's own zone (UTC is shown beside it).
  document.addEventListener("DOMContentLoaded", function () {
    var zone = "UTC";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch (e) { zone = "UTC"; }
    document.querySelectorAll("input.tz").forEach(function (input) {
      if (input.dataset.tzDefault === "UTC") {
        input.placeholder = zone;
        input.title = "Your browser's zone is " + zone;
      }
    });
  });
})();
