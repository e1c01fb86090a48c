// Template builds: a chosen spec folder is packed as a ustar archive here (or a .tar is sent as
// it is), POSTed to /console/templates, and the build log is streamed in as it is written.
"use strict";
(function () {
  const enc = new TextEncoder();

  function header(name, size) {
    const h = new Uint8Array(512);
    const put = (text, at, len) => h.set(enc.encode(text).slice(0, len), at);
    const octal = (n, len) => n.toString(8).padStart(len - 1, "0") + "\0";
    put(name, 0, 100); put(octal(0o644, 8), 100, 8); put(octal(0, 8), 108, 8); put(octal(0, 8), 116, 8);
    put(octal(size, 12), 124, 12); put(octal(0, 12), 136, 12); put("        ", 148, 8);
    put("0", 156, 1); put("ustar\0", 257, 6); put("00", 263, 2);
    let sum = 0; for (const b of h) sum += b;
    put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
    return h;
  }

  async function pack(files) {
    const parts = [];
    for (const file of files) {
      const path = file.webkitRelativePath.split("/").slice(1).join("/");
      if (!path || enc.encode(path).length > 99) throw new Error("a path too long for the archive: " + path);
      const data = new Uint8Array(await file.arrayBuffer());
      parts.push(header(path, data.length), data, new Uint8Array((512 - data.length % 512) % 512));
    }
    parts.push(new Uint8Array(1024));
    return new Blob(parts, {type: "application/x-tar"});
  }

  function line_of(r) {
    if (r.type === "output") return r.text || "";
    if (r.type === "step") return "[step " + r.index + "/" + r.total + "] " + r.description + (r.cached ? " (cached)" : "");
    if (r.type === "done") return "[done: " + r.state + "] " + (r.message || "");
    return "[" + r.type + "] " + (r.message || "");
  }

  async function follow(ref) {
    const log = document.getElementById("build-log");
    const res = await window.sanboxCall("/console/templates/" + ref + "/logs");
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let rest = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      rest += dec.decode(value, {stream: true});
      const lines = rest.split("\n"); rest = lines.pop();
      for (const line of lines) {
        if (!line) continue;
        const r = JSON.parse(line);
        log.textContent += line_of(r) + "\n";
        log.scrollTop = log.scrollHeight;
      }
    }
    log.textContent += "[log ended]\n";
    // the table says the build's outcome now; htmx wires only what it swapped in itself, so its
    // Rebuild and Delete buttons are handed to it
    const fresh = new DOMParser().parseFromString(await (await fetch("/console/templates")).text(), "text/html");
    const table = fresh.getElementById("templates");
    if (table) {
      document.getElementById("templates").replaceWith(table);
      htmx.process(table);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("build");
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const folder = document.getElementById("build-folder").files;
      const tar = document.getElementById("build-tar").files;
      const body = tar.length ? tar[0] : await pack(Array.from(folder));
      const name = document.getElementById("build-name").value;
      document.getElementById("build-log").textContent = "";
      const res = await window.sanboxCall("/console/templates" + (name ? "?name=" + encodeURIComponent(name) : ""),
                                          {method: "POST", body: body, headers: {"Content-Type": "application/x-tar"}});
      const built = await res.json();
      window.sanboxFlash(built.building ? "building " + built.name + "…" : built.name + " is up to date", true);
      await follow(built.id);
    });
    document.addEventListener("click", (ev) => {
      const b = ev.target.closest(".show-log");
      if (b) { document.getElementById("build-log").textContent = ""; follow(b.dataset.ref); }
    });
  });
})();
