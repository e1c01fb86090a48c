// opencode-front: the opencode type's port 4096 (published, private). It checks every request's
// HTTP Basic password (user `opencode`) against this computer's own and passes the request, or
// the WebSocket it upgrades to, to `opencode serve` on 127.0.0.1:4097 (no password of its own).
//
// opencode drops the connections it accepts in the 20 s or so after it was restored from saved
// memory under emulation (they are never answered, later ones are at once). So after a start, a
// new machine-id (a restore, a claim, a fork) or a jump of the clock (a resume), the front holds
// requests until opencode answers a health check of its own, for up to two minutes.
//
// The password is kept in /root/.config/opencode/server-password, made for the machine-id
// written next to it. A computer restored from the type's ready snapshot, claimed from a warm
// pool or forked gets a new machine-id: the next request, or the check every second, makes it a
// new password. opencode itself goes on running: it takes minutes to start under emulation, and
// a restart would leave a claimed computer's URL unanswered that long. `opencode-password`
// prints the password; writing a new one to the file changes it at once.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const net = require('net');

const DIR = '/root/.config/opencode';
const PASSWORD = `${DIR}/server-password`;
const STAMP = `${PASSWORD}.machine-id`;
const USER = 'opencode';
const LOCAL = '127.0.0.1';
const PORT = 4096;
const UPSTREAM = 4097;
const MAX_CONNECTIONS = 512;
const PROBE_TIMEOUT_MS = 2000;
const HOLD_MS = 120_000;
const JUMP_MS = 5000;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const NOT_ANSWERING = 'opencode is not answering on this computer (still starting? see '
  + '/var/log/sanbox/services/opencode.log)';
const DENIED = 'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="opencode"\r\n'
  + 'Content-Length: 0\r\nConnection: close\r\n\r\n';

function read(path) {
  try {
    return fs.readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}

function replace(path, text) {
  fs.writeFileSync(`${path}.tmp`, text, { mode: 0o600 });
  fs.renameSync(`${path}.tmp`, path);
}

// Bytes from the kernel, never from crypto.randomBytes: OpenSSL's generator lives in this
// process's memory, which every computer restored from one snapshot has a copy of (they would
// all draw the same "random" password); the kernel's pool is reseeded in each copy.
function kernelRandom(n) {
  const buf = Buffer.alloc(n);
  const fd = fs.openSync('/dev/urandom', 'r');
  try {
    for (let got = 0; got < n;) got += fs.readSync(fd, buf, got, n - got, null);
  } finally {
    fs.closeSync(fd);
  }
  return buf;
}

function newPassword() {
  // 62 letters and digits, drawn without bias: bytes >= 248 are skipped
  let out = '';
  while (out.length < 32) {
    for (const b of kernelRandom(48)) {
      if (b < 248 && out.length < 32) out += ALPHABET[b % 62];
    }
  }
  return out;
}

// This computer's password, made anew when the machine-id is not the one it was made for.
function password() {
  const id = read('/etc/machine-id');
  const current = read(PASSWORD);
  if (current && read(STAMP) === id) return current;
  fs.mkdirSync(DIR, { recursive: true, mode: 0o700 });
  const made = newPassword();
  replace(PASSWORD, made);
  replace(STAMP, `${id}\n`); // after the password: a matching stamp means it is new
  console.log(`opencode-front: a new password for this computer (machine-id ${id})`);
  recheck('a new machine-id');
  return made;
}

// -- holding requests until opencode answers ---------------------------------------------------

let answering = false;
let probing = false;
const held = new Set(); // bounded by the server's connections: one request in flight each

function recheck(why) {
  if (answering) console.log(`opencode-front: ${why}: holding requests until opencode answers`);
  answering = false;
  probe();
}

function probe() {
  if (probing || answering) return;
  probing = true;
  let done = false;
  const finish = (ok) => {
    if (done) return;
    done = true;
    probing = false;
    if (!ok) {
      setTimeout(probe, 500);
      return;
    }
    answering = true;
    for (const release of held) release();
    held.clear();
  };
  const req = http.get({
    host: LOCAL, port: UPSTREAM, path: '/global/health', agent: false, timeout: PROBE_TIMEOUT_MS,
  }, (res) => {
    res.resume();
    finish(res.statusCode === 200);
  });
  req.on('timeout', () => req.destroy(new Error('timed out')));
  req.on('error', () => finish(false));
}

// run `go` once opencode answers, or `fail` after HOLD_MS
function whenAnswering(go, fail) {
  if (answering) {
    go();
    return;
  }
  const release = () => {
    clearTimeout(timer);
    go();
  };
  const timer = setTimeout(() => {
    held.delete(release);
    fail();
  }, HOLD_MS);
  held.add(release);
  probe();
}

function authorized(req) {
  try {
    return matches(req);
  } catch (err) { // the password could not be read or made: nobody is let in
    console.error(`opencode-front: ${err.message}`);
    return false;
  }
}

function matches(req) {
  const m = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(req.headers.authorization || '');
  if (!m) return false;
  const pair = Buffer.from(m[1], 'base64').toString('utf8');
  const colon = pair.indexOf(':');
  if (colon < 0 || pair.slice(0, colon) !== USER) return false;
  const given = crypto.createHash('sha256').update(pair.slice(colon + 1)).digest();
  const want = crypto.createHash('sha256').update(password()).digest();
  return crypto.timingSafeEqual(given, want);
}

function answer(res, status, text, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...headers });
  res.end(`${text}\n`);
}

const server = http.createServer((req, res) => {
  if (!authorized(req)) {
    answer(res, 401, 'opencode: user opencode and this computer\'s password (opencode-password)',
      { 'WWW-Authenticate': 'Basic realm="opencode"' });
    req.resume();
    return;
  }
  whenAnswering(() => pass(req, res), () => answer(res, 503, NOT_ANSWERING));
});

function pass(req, res) {
  if (res.destroyed) return; // the client left while it was held
  const up = http.request({
    host: LOCAL, port: UPSTREAM, method: req.method, path: req.url, headers: req.headers,
  }, (ur) => {
    res.writeHead(ur.statusCode, ur.statusMessage, ur.headers);
    ur.pipe(res);
  });
  up.on('error', () => {
    if (res.headersSent) {
      res.destroy();
    } else {
      answer(res, 502, NOT_ANSWERING);
    }
  });
  res.on('close', () => up.destroy());
  req.pipe(up);
}

server.on('upgrade', (req, socket, head) => {
  socket.on('error', () => socket.destroy());
  if (!authorized(req)) {
    socket.end(DENIED);
    return;
  }
  whenAnswering(() => tunnel(req, socket, head), () => socket.destroy());
});

function tunnel(req, socket, head) {
  if (socket.destroyed) return;
  const up = net.connect(UPSTREAM, LOCAL, () => {
    let lines = `${req.method} ${req.url} HTTP/1.1\r\n`;
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      lines += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
    }
    up.write(`${lines}\r\n`);
    if (head.length) up.write(head);
    socket.pipe(up).pipe(socket);
  });
  up.on('error', () => socket.destroy());
  socket.on('close', () => up.destroy());
}

server.maxConnections = MAX_CONNECTIONS;
server.keepAliveTimeout = 65_000;
server.listen(PORT, LOCAL, () => {
  password();
  console.log(`opencode-front: on ${LOCAL}:${PORT}, to opencode on ${LOCAL}:${UPSTREAM}`);
  probe();
});

// every second: a new machine-id makes a new password; a wall clock that moved other than the
// monotonic one says this computer was paused or restored (the agent sets the clock then)
let lastWall = Date.now();
let lastMono = performance.now();
setInterval(() => {
  const wall = Date.now();
  const mono = performance.now();
  if (Math.abs(wall - lastWall - (mono - lastMono)) > JUMP_MS) recheck('the clock jumped');
  lastWall = wall;
  lastMono = mono;
  try {
    password();
  } catch (err) {
    console.error(`opencode-front: no password made: ${err.message}`);
  }
}, 1000);
