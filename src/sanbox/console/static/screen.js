// A browser computer's screen in noVNC: watch (the server drops every input message, whatever
// this page does) or take over (keyboard and mouse), each its own WebSocket.
import RFB from "./vendor/novnc/core/rfb.js";

const view = document.getElementById("screen-view");
const status = document.getElementById("screen-mode");
const toggle = document.getElementById("screen-toggle");
let rfb = null;
let mode = "watch";

function connect() {
  if (rfb) rfb.disconnect();
  view.replaceChildren();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/console/computers/${view.dataset.computer}/screen/${mode}`;
  rfb = new RFB(view, url, {shared: true});
  rfb.viewOnly = mode === "watch";
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => { view.dataset.connected = mode; });
  rfb.addEventListener("disconnect", (ev) => {
    delete view.dataset.connected;
    status.textContent = ev.detail.clean ? "Disconnected" : "The screen could not be reached: is the computer running?";
  });
  status.textContent = mode === "watch" ? "Watching (view only)" : "In control: keyboard and mouse go to the browser";
  toggle.textContent = mode === "watch" ? "Take over" : "Give back";
  if (mode === "control") rfb.focus();
}

toggle.addEventListener("click", () => { mode = mode === "watch" ? "control" : "watch"; connect(); });
connect();
