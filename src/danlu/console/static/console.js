// danlu console: progressive enhancement only. Every page works without this script; with it,
// instance status and cost update live, logs stream, and the rent form shows its cost estimate.
"use strict";
(function () {
  function liveInstances(el) {
    var src = new EventSource(el.getAttribute("data-live"));
    var only = el.getAttribute("data-id");
    src.onmessage = function (ev) {
      var rows = JSON.parse(ev.data);
      for (var i = 0; i < rows.length; i++) {
        var r = rows[i];
        if (only && r.id !== only) continue;
        var scope = only ? el : document.getElementById("row-" + r.id);
        if (!scope) continue;
        set(scope, "status", r.status_text, "status s-" + r.status);
        set(scope, "cost", r.cost);
        set(scope, "billed", r.billed);
        if (only) set(scope, "reason", r.reason || "—");
      }
      el.setAttribute("data-updated", String(Date.now()));
      el.setAttribute("data-updates", String(parseInt(el.getAttribute("data-updates") || "0", 10) + 1));
    };
    src.addEventListener("end", function () { src.close(); });
  }
  function set(scope, field, text, cls) {
    var cell = scope.querySelector('[data-field="' + field + '"]');
    if (!cell) return;
    if (cell.textContent !== text) cell.textContent = text;
    if (cls && cell.className !== cls) cell.className = cls;
  }
  function liveLog(pre) {
    var src = new EventSource(pre.getAttribute("data-log"));
    src.onmessage = function (ev) {
      var chunk = JSON.parse(ev.data);
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(document.createTextNode(chunk.text));
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    };
    src.addEventListener("end", function () { src.close(); });
  }
  function rentEstimate(form) {
    var gpu = form.querySelector("#r-gpu"), count = form.querySelector("#r-count");
    var out = document.getElementById("estimate-value");
    function update() {
      var opt = gpu.options[gpu.selectedIndex];
      if (!opt) return;
      var est = JSON.parse(opt.getAttribute("data-estimates"));
      var max = parseInt(opt.getAttribute("data-max"), 10) || 1;
      count.max = String(max);
      var plan = form.querySelector('input[name="plan"]:checked').value;
      var key = (plan === "interruptible" ? "s" : "") + count.value;
      out.textContent = est[key] || "—";
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }
  // An upload form (data-drop): files dropped on it are the form's files, sent as if chosen and submitted.
  function dropZone(form) {
    var input = form.querySelector('input[type="file"]');
    form.addEventListener("dragover", function (ev) {
      ev.preventDefault();
      form.classList.add("dragging");
    });
    form.addEventListener("dragleave", function () { form.classList.remove("dragging"); });
    form.addEventListener("drop", function (ev) {
      ev.preventDefault();
      form.classList.remove("dragging");
      if (!ev.dataTransfer || !ev.dataTransfer.files.length) return;
      input.files = ev.dataTransfer.files;
      form.submit();
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var drops = document.querySelectorAll("form[data-drop]");
    for (var k = 0; k < drops.length; k++) dropZone(drops[k]);
    var live = document.querySelectorAll("[data-live]");
    for (var i = 0; i < live.length; i++) liveInstances(live[i]);
    var logs = document.querySelectorAll("pre[data-log]");
    for (var j = 0; j < logs.length; j++) liveLog(logs[j]);
    var rent = document.getElementById("rent-form");
    if (rent) rentEstimate(rent);
  });
})();
