// The checks the browser suite runs in the page (reliability/browser). Each function
// reports raw facts (sizes, hashes, ids, what came back); the Go test compares them with
// what the target served. Every wait is bounded by LIMIT_MS.
'use strict';

const LIMIT_MS = 30000;

// within rejects when p has not settled after ms milliseconds.
function within(p, ms, what) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(what + ': no answer within ' + ms + ' ms')), ms); }),
  ]);
}

function hex(buf) {
  return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, '0')).join('');
}

async function sha256(buf) {
  return hex(await crypto.subtle.digest('SHA-256', buf));
}

function randomBytes(n) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b;
}

// randomText is a string of n random printable ASCII characters whose start, when there
// is room, is replaced by characters of two, three and four UTF-8 bytes.
function randomText(n) {
  const b = randomBytes(n);
  for (let i = 0; i < n; i++) b[i] = 0x20 + (b[i] % 95);
  const s = new TextDecoder().decode(b);
  return n >= 4 ? 'ä€😀' + s.slice(4) : s;
}

// images loads n images at once and reports each one's natural size (or its error).
function images(n) {
  const box = document.getElementById('images');
  const loads = [];
  for (let i = 0; i < n; i++) {
    const img = new Image();
    loads.push(new Promise((resolve) => {
      img.onload = () => resolve({ i, w: img.naturalWidth, h: img.naturalHeight });
      img.onerror = () => resolve({ i, error: true });
    }));
    img.src = '/img/' + i + '.png';
    box.appendChild(img);
  }
  return Promise.all(loads);
}

// jsonFetches sends n JSON requests at once, GET for even i and POST for odd.
function jsonFetches(n) {
  return Promise.all(Array.from({ length: n }, async (_, i) => {
    let r;
    if (i % 2 === 0) {
      r = await fetch('/api/item?i=' + i, { headers: { Accept: 'application/json' } });
    } else {
      r = await fetch('/api/item', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ i, pad: 'x'.repeat(i * 100) }),
      });
    }
    const j = await r.json();
    return { status: r.status, sent: i, i: j.i, square: j.square, padLen: j.padLen, method: j.method };
  }));
}

// upload posts n random bytes and reports their hash and the target's.
async function upload(n) {
  const body = randomBytes(n);
  const sum = await sha256(body);
  const r = await fetch('/upload', { method: 'POST', body, headers: { 'Content-Type': 'application/octet-stream' } });
  const got = await r.json();
  return { status: r.status, size: n, sha256: sum, targetSize: got.size, targetSha256: got.sha256 };
}

// download fetches /download and reports its size and hash.
async function download() {
  const r = await fetch('/download');
  const buf = await r.arrayBuffer();
  return { status: r.status, size: buf.byteLength, sha256: await sha256(buf) };
}

// Sock is a WebSocket whose messages are read in order with next().
class Sock {
  constructor(ws) {
    this.ws = ws;
    this.queue = [];
    this.waiters = [];
    this.closed = null;
    ws.binaryType = 'arraybuffer';
    ws.onmessage = (e) => {
      if (this.waiters.length) this.waiters.shift()(e.data);
      else this.queue.push(e.data);
    };
    this.closing = new Promise((resolve) => {
      ws.onclose = (e) => {
        this.closed = { code: e.code, reason: e.reason, clean: e.wasClean };
        for (const w of this.waiters.splice(0)) w(null);
        resolve(this.closed);
      };
    });
  }

  next() {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.closed) return Promise.resolve(null);
    return within(new Promise((resolve) => this.waiters.push(resolve)), LIMIT_MS, 'websocket message');
  }

  close() {
    this.ws.close(1000, 'done');
    return within(this.closing, LIMIT_MS, 'websocket close');
  }
}

function openSock(path) {
  return within(new Promise((resolve, reject) => {
    const ws = new WebSocket('wss://' + location.host + path);
    const s = new Sock(ws);
    ws.onopen = () => resolve(s);
    ws.onerror = () => reject(new Error('websocket ' + path + ' failed to open'));
  }), LIMIT_MS, 'websocket open');
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// websocketEcho sends a message of each of the sizes, binary and text in turn, all at
// once, and compares each echo with what was sent.
async function websocketEcho(sizes) {
  const n = sizes.length;
  const s = await openSock('/ws');
  const sent = [];
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const size = sizes[i];
    const m = i % 2 === 0 ? randomBytes(size) : randomText(size);
    sent.push(m);
    bytes += typeof m === 'string' ? new TextEncoder().encode(m).length : size;
    s.ws.send(m);
  }
  const mismatches = [];
  let received = 0;
  for (let i = 0; i < n; i++) {
    const got = await s.next();
    if (got === null) break;
    received++;
    const want = sent[i];
    const ok = typeof want === 'string' ? got === want : got instanceof ArrayBuffer && sameBytes(new Uint8Array(got), want);
    if (!ok) mismatches.push(i);
  }
  const whoami = received === n ? await whoamiOf(s) : null;
  const closed = await s.close();
  return { sent: n, received, bytes, mismatches, whoami, closed };
}

async function whoamiOf(s) {
  s.ws.send('whoami');
  return s.next();
}

// sse reads n events from /sse, then closes the stream, and reports the event ids in the
// order they came, the longest wait for an event (the first one's counted from the
// stream's opening) and the errors.
function sse(n) {
  return new Promise((resolve) => {
    const es = new EventSource('/sse');
    const ids = [];
    let last = performance.now();
    let maxGapMs = 0;
    let errors = 0;
    es.onmessage = (e) => {
      const now = performance.now();
      maxGapMs = Math.max(maxGapMs, now - last);
      last = now;
      ids.push(Number(e.lastEventId));
      if (ids.length === n) {
        es.close();
        resolve({ ids, maxGapMs, errors });
      }
    };
    es.onerror = () => { errors++; };
  });
}

// runChecks runs the checks at once, then the event stream alone (so that the time between
// its events is the stream's, not the busy page's), and reports each one's facts or error.
async function runChecks(cfg) {
  const t0 = performance.now();
  const settle = (p) => within(p, LIMIT_MS, 'check').then(
    (v) => ({ ok: v, ms: performance.now() - t0 }),
    (e) => ({ error: String(e), ms: performance.now() - t0 }));
  const [imgs, json, up, down, ws] = await Promise.all([
    settle(images(cfg.images)),
    settle(jsonFetches(cfg.json)),
    settle(upload(cfg.upload)),
    settle(download()),
    settle(websocketEcho(cfg.wsSizes)),
  ]);
  const events = await settle(sse(cfg.sseEvents));
  return { images: imgs, json, upload: up, download: down, websocket: ws, sse: events };
}

// The WebSocket held open across route-table changes.
let held = null;

async function holdOpen() {
  held = await openSock('/ws');
  return true;
}

// holdPing sends tag over the held WebSocket and reports the echo and whether it closed.
async function holdPing(tag) {
  if (held.closed) return { closed: held.closed };
  held.ws.send(tag);
  const echo = await held.next();
  return { echo, closed: held.closed };
}

async function holdWhoami() {
  return whoamiOf(held);
}

async function holdClose() {
  return held.close();
}

// freshWhoami opens a new WebSocket, asks which target it reached, and closes it.
async function freshWhoami() {
  const s = await openSock('/ws');
  const who = await whoamiOf(s);
  await s.close();
  return who;
}
