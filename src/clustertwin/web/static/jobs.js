// Long work as a background job (/api/jobs/..., clustertwin.web.jobs): a link marked data-job (the Train page's
// report) starts the job of its own URL instead of waiting on it, shows its progress with a Cancel button, and
// saves the file when the job is done. Text is written with textContent only (the page's rule).
(function () {
  "use strict";
  var box = document.getElementById("job");
  if (!box) return;
  var label = document.getElementById("job-label");
  var bar = document.getElementById("job-progress");
  var text = document.getElementById("job-text");
  var cancel = document.getElementById("job-cancel");
  var current = null, timer = null;

  function show(what, state, fraction) {
    box.hidden = false;
    box.className = "job" + (state === "failed" ? " error" : "");
    label.textContent = what;
    text.textContent = state + (fraction === null || fraction === undefined ? "" : " " + Math.round(100 * fraction) + "%");
    if (fraction === null || fraction === undefined) bar.removeAttribute("value");
    else bar.value = fraction;
    document.body.dataset.job = state;  // for the browser tests
  }
  function stop(what, state, message) {
    clearTimeout(timer);
    current = null;
    cancel.disabled = true;
    show(what, state, state === "done" ? 1 : bar.value);
    if (message) text.textContent = message;
  }
  function save(url, filename) {
    var a = document.createElement("a");
    a.setAttribute("href", url);
    a.setAttribute("download", filename || "");
    document.body.appendChild(a);
    a.click();
    a.remove();
  }
  function poll(id, what) {
    fetch("/api/jobs/" + encodeURIComponent(id)).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, data: d}; });
    }).then(function (res) {
      if (current !== id) return;  // cancelled meanwhile
      var d = res.data;
      if (!res.ok) { stop(what, "failed", d.error || "error"); return; }
      if (d.state === "queued" || d.state === "running") {
        show(what, d.state, d.progress.fraction);
        timer = setTimeout(function () { poll(id, what); }, 500);
        return;
      }
      stop(what, d.state, d.state === "failed" ? d.error : d.state === "done" ? "done: " + (d.filename || "") : null);
      if (d.state === "done" && d.file) save(d.file, d.filename);
    }).catch(function (e) { stop(what, "failed", "request failed: " + e); });
  }
  function start(link) {
    var href = link.getAttribute("href");
    if (!href || href.indexOf("/api/") !== 0 || current) return;
    var what = link.textContent;
    show(what, "starting", null);
    fetch("/api/jobs/" + href.slice("/api/".length), {method: "POST"}).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, data: d}; });
    }).then(function (res) {
      if (!res.ok) { stop(what, "failed", res.data.error || "error"); return; }
      current = res.data.id;
      cancel.disabled = false;
      poll(current, what);
    }).catch(function (e) { stop(what, "failed", "request failed: " + e); });
  }
  cancel.addEventListener("click", function () {
    var id = current;
    if (!id) return;
    current = null;
    clearTimeout(timer);
    fetch("/api/jobs/" + encodeURIComponent(id), {method: "DELETE"}).then(function (r) { return r.json(); })
      .then(function (d) { stop(label.textContent, d.state || "cancelled", d.error || null); })
      .catch(function (e) { stop(label.textContent, "failed", "request failed: " + e); });
  });
  Array.prototype.forEach.call(document.querySelectorAll("a[data-job]"), function (a) {
    a.addEventListener("click", function (e) {
      if (!a.getAttribute("href")) return;
      e.preventDefault();
      start(a);
    });
  });
})();
