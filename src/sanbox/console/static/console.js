// The console's own script: errors in words, live rows over server-sent events, uploads with
// progress, port opening. No inline script anywhere (the pages' CSP forbids it).
"use strict";
(function () {
  const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

  function flash(text, ok) {
    const box = document.getElementById("flash");
    if (!box) return;
    box.textContent = text;
    box.className = ok ? "ok" : "error";
    box.hidden = false;
  }
  window.sanboxFlash = flash;

  function errorText(xhr) {
    try {
      const body = JSON.parse(xhr.responseText);
      if (body && body.error) return body.error.message + " (" + body.error.code + ")";
    } catch (e) { /* not JSON */ }
    return "the server answered " + xhr.status + ": try again, or reload the page";
  }

  async function call(url, options) {
    options = options || {};
    options.headers = Object.assign({"X-CSRF-Token": csrf()}, options.headers || {});
    options.credentials = "same-origin";
    const res = await fetch(url, options);
    if (res.status === 401 && res.headers.get("X-Login")) {
      window.location = res.headers.get("X-Login");
      throw new Error("logged out");
    }
    if (!res.ok) {
      let text = "the server answered " + res.status;
      try { const b = await res.json(); text = b.error.message + " (" + b.error.code + ")"; } catch (e) { /* keep */ }
      flash(text);
      throw new Error(text);
    }
    return res;
  }
  window.sanboxCall = call;

  // a verb's answer (or a live event) changed the computer's state: say so to the terminals
  let lastState = null;
  function stateChanged() {
    const state = document.getElementById("state");
    if (!state || state.dataset.state === lastState) return;
    lastState = state.dataset.state;
    document.dispatchEvent(new CustomEvent("sanbox:state", {detail: lastState}));
  }
  document.addEventListener("htmx:afterSettle", stateChanged);

  document.addEventListener("htmx:responseError", (ev) => flash(errorText(ev.detail.xhr)));
  document.addEventListener("htmx:sendError", () => flash("the server could not be reached: check that it runs, then try again"));
  document.addEventListener("htmx:afterRequest", (ev) => {
    const form = ev.detail.elt;
    if (form.id === "create" && ev.detail.successful) {
      upsert(ev.detail.xhr.responseText);
      flash("creating…", true);
      form.reset();
    }
  });

  function upsert(html, id) {
    const rows = document.getElementById("rows");
    if (!rows) return;
    const t = document.createElement("tbody");
    t.innerHTML = html.trim();
    const row = t.firstElementChild;
    const rowId = id || (row && row.dataset.id);
    const old = document.getElementById("row-" + rowId);
    if (!row) { if (old) old.remove(); document.getElementById("count").textContent = rows.children.length; return; }
    const wanted = document.getElementById("computers").dataset.filterState;
    if (wanted && row.dataset.state !== wanted) { if (old) old.remove(); return; }
    if (old) old.replaceWith(row); else rows.prepend(row);
    document.getElementById("count").textContent = rows.children.length;
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
  }

  function live() {
    const table = document.getElementById("computers");
    const computer = document.getElementById("computer");
    const url = (table && table.dataset.stream) || (computer && computer.dataset.stream);
    if (!url) return;
    const source = new EventSource(url);
    source.addEventListener("row", (ev) => {
      const msg = JSON.parse(ev.data);
      if (table) upsert(msg.html, msg.id);
      if (computer && computer.dataset.id === msg.id && msg.head) {
        document.getElementById("head").innerHTML = msg.head;
        stateChanged();
      }
      if (computer && computer.dataset.id === msg.id && msg.event) {
        const li = document.createElement("li");
        const when = document.createElement("time");
        when.textContent = msg.event.created_at;
        const what = document.createElement("b");
        what.textContent = msg.event.type;
        li.append(when, " ", what, " " + (msg.event.message || ""));
        document.getElementById("event-list").prepend(li);
      }
    });
    source.addEventListener("logout", () => { source.close(); window.location = "/console/login?why=ended"; });
  }

  function files() {
    const section = document.getElementById("files");
    if (!section) return;
    const ref = section.dataset.computer;
    const here = () => { const l = document.getElementById("files-listing"); return l ? l.dataset.path : "/root"; };
    const reload = (path) => htmx.ajax("GET", "/console/computers/" + ref + "/files/list?path=" + encodeURIComponent(path), "#files-list");
    document.getElementById("files-nav").addEventListener("submit", (ev) => { ev.preventDefault(); reload(document.getElementById("files-path").value); });
    document.getElementById("mkdir").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const body = new URLSearchParams({path: here().replace(/\/$/, "") + "/" + document.getElementById("mkdir-name").value});
      await call("/console/computers/" + ref + "/files/mkdir", {method: "POST", body: body});
      reload(here());
    });
    section.addEventListener("click", async (ev) => {
      const button = ev.target.closest(".file-delete");
      if (!button || !confirm("Delete " + button.dataset.path + "?")) return;
      const body = new URLSearchParams({path: button.dataset.path, recursive: button.dataset.dir});
      await call("/console/computers/" + ref + "/files/delete", {method: "POST", body: body});
      reload(here());
    });
    const input = document.getElementById("upload-input");
    const bar = document.getElementById("upload-progress");
    input.addEventListener("change", () => {
      const queue = Array.from(input.files);
      const next = () => {
        const file = queue.shift();
        if (!file) { bar.hidden = true; input.value = ""; reload(here()); return; }
        const xhr = new XMLHttpRequest();
        const path = here().replace(/\/$/, "") + "/" + file.name;
        xhr.open("PUT", "/console/computers/" + ref + "/files?path=" + encodeURIComponent(path));
        xhr.setRequestHeader("X-CSRF-Token", csrf());
        xhr.upload.onprogress = (e) => { if (e.lengthComputable) bar.value = 100 * e.loaded / e.total; };
        xhr.onload = () => {
          if (xhr.status >= 400) { flash(errorText(xhr)); bar.hidden = true; return; }
          flash("uploaded " + path, true); next();
        };
        xhr.onerror = () => flash("the upload failed: the server could not be reached");
        bar.hidden = false; bar.value = 0;
        xhr.send(file);
      };
      next();
    });
  }

  function ports() {
    document.addEventListener("click", async (ev) => {
      const button = ev.target.closest(".open-port");
      if (!button) return;
      const res = await call(button.dataset.url, {method: "POST"});
      const url = (await res.json()).url;
      window.open(url, "_blank", "noopener");
    });
  }

  function loginLink() {
    // a login link's token rides in the fragment (never sent to a server): into the form, then
    // out of the address bar and the history
    const field = document.getElementById("link-token");
    if (!field) return;
    field.value = new URLSearchParams(location.hash.slice(1)).get("t") || "";
    history.replaceState(null, "", location.pathname);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const state = document.getElementById("state");
    lastState = state ? state.dataset.state : null;
    loginLink(); live(); files(); ports();
  });
})();
