// Terminal tabs: each an xterm.js terminal on its own PTY session over the console's exec
// WebSocket (same messages as /v1/computers/{ref}/exec/stream). A tab whose session ended (the
// computer paused, stopped, restarted) reconnects when the computer is running again.
"use strict";
(function () {
  const enc = new TextEncoder();
  const b64 = (bytes) => { let s = ""; for (const b of bytes) s += String.fromCharCode(b); return btoa(s); };
  const unb64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const tabs = [];
  let count = 0;

  function send(tab, data) {
    tab.ws.send(JSON.stringify({type: "stdin", data: b64(enc.encode(data))}));
  }

  function connect(tab) {
    const id = document.getElementById("computer").dataset.id;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(scheme + "//" + location.host + "/console/computers/" + id + "/terminal");
    tab.ws = ws;
    tab.live = false;
    ws.onopen = () => {
      tab.live = true;
      ws.send(JSON.stringify({type: "start", pty: true, rows: tab.term.rows, cols: tab.term.cols}));
      for (const data of tab.pending.splice(0)) send(tab, data);  // typed while connecting
    };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "stdout" || msg.type === "stderr") tab.term.write(unb64(msg.data));
      else if (msg.type === "exit") tab.term.write("\r\n[the shell exited]\r\n");
      else if (msg.type === "error") tab.term.write("\r\n[" + msg.code + ": " + msg.message + "]\r\n");
    };
    ws.onclose = () => {
      if (tab.live) tab.term.write("\r\n[disconnected: it reconnects when the computer runs again]\r\n");
      tab.live = false;
      tab.ws = null;
    };
  }

  function select(tab) {
    for (const t of tabs) {
      const on = t === tab;
      t.pane.hidden = !on;
      t.button.setAttribute("aria-selected", on ? "true" : "false");
    }
    tab.fit.fit();
    tab.term.focus();
  }

  function open() {
    count += 1;
    const button = document.createElement("button");
    button.type = "button";
    button.setAttribute("role", "tab");
    button.className = "term-tab";
    button.textContent = "Shell " + count;
    const pane = document.createElement("div");
    pane.className = "term-pane";
    pane.setAttribute("role", "tabpanel");
    pane.setAttribute("aria-label", "Shell " + count);
    document.getElementById("term-tabs").appendChild(button);
    document.getElementById("term-panes").appendChild(pane);
    const term = new Terminal({cursorBlink: true, fontSize: 14, scrollback: 5000});
    const fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(pane);
    const tab = {button, pane, term, fit, ws: null, live: false, pending: []};
    tabs.push(tab);
    term.onData((data) => {
      if (tab.ws && tab.live) send(tab, data);
      else { tab.pending.push(data); if (!tab.ws) connect(tab); }
    });
    term.onResize(({rows, cols}) => {
      if (tab.ws && tab.live) tab.ws.send(JSON.stringify({type: "resize", rows, cols}));
    });
    button.addEventListener("click", () => select(tab));
    select(tab);
    connect(tab);
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!document.getElementById("term-tabs")) return;
    document.getElementById("new-terminal").addEventListener("click", open);
    window.addEventListener("resize", () => { for (const t of tabs) if (!t.pane.hidden) t.fit.fit(); });
    document.addEventListener("sanbox:state", (ev) => {
      if (ev.detail === "running") for (const t of tabs) if (!t.ws) connect(t);
    });
    const state = document.getElementById("state");
    if (state && state.dataset.state === "running") open();
  });
})();
