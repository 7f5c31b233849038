// The sipsec browser phone: register over WebSocket, call, answer, hang up.
// With ?auto=answer or ?auto=call&target=bob it runs by itself (the tests
// drive it so) and, when ?report=URL is given, posts what happened there as
// JSON lines: registered, confirmed, media (RTCPeerConnection statistics),
// ended, failed.
'use strict';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
for (const k of ['server', 'domain', 'user', 'password', 'target']) {
  if (params.has(k)) $(k).value = params.get(k);
}

function log(line) {
  $('log').textContent += new Date().toISOString().slice(11, 23) + ' ' + line + '\n';
  console.log(line);
}

function report(event, extra) {
  const body = JSON.stringify(Object.assign({ event, user: $('user').value }, extra || {}));
  log(body);
  const url = params.get('report');
  if (url) fetch(url, { method: 'POST', body, keepalive: true }).catch(() => {});
}

let ua = null;
let session = null;
const media = { mediaConstraints: { audio: true, video: false }, pcConfig: { iceServers: [] } };

// Inbound and outbound RTP counted by the browser's own WebRTC stack.
async function mediaStats(pc) {
  const stats = await pc.getStats();
  const out = { packetsReceived: 0, packetsSent: 0, bytesReceived: 0 };
  stats.forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'audio') {
      out.packetsReceived += s.packetsReceived || 0;
      out.bytesReceived += s.bytesReceived || 0;
    }
    if (s.type === 'outbound-rtp' && s.kind === 'audio') out.packetsSent += s.packetsSent || 0;
    if (s.type === 'transport') out.dtlsState = s.dtlsState;
  });
  return out;
}

function attach(s) {
  session = s;
  $('hangup').disabled = false;
  s.on('peerconnection', (e) => {
    e.peerconnection.addEventListener('track', (t) => { $('remote').srcObject = t.streams[0]; });
  });
  s.on('confirmed', () => {
    report('confirmed', { direction: s.direction });
    // Let media flow, then report what the browser received.
    setTimeout(async () => {
      if (!s.connection) return;
      report('media', await mediaStats(s.connection));
      if (params.get('auto') === 'call') s.terminate();
    }, Number(params.get('talk') || 3000));
  });
  s.on('ended', (e) => { report('ended', { cause: e.cause, originator: e.originator }); $('hangup').disabled = true; });
  s.on('failed', (e) => {
    report('failed', { cause: e.cause, originator: e.originator, status: e.message && e.message.status_code });
    $('hangup').disabled = true;
  });
}

function start() {
  const domain = $('domain').value;
  const socket = new JsSIP.WebSocketInterface($('server').value);
  ua = new JsSIP.UA({
    sockets: [socket],
    uri: `sip:${$('user').value}@${domain}`,
    password: $('password').value,
    register: true,
    session_timers: false,
  });
  ua.on('registered', () => {
    report('registered');
    $('call').disabled = false;
    if (params.get('auto') === 'call') call();
  });
  ua.on('registrationFailed', (e) => report('registrationFailed', { cause: e.cause }));
  ua.on('disconnected', () => log('WebSocket disconnected'));
  ua.on('newRTCSession', (e) => {
    if (e.originator !== 'remote') return;
    attach(e.session);
    report('incoming', { from: e.request.from.uri.toString() });
    if (params.get('auto') === 'answer') e.session.answer(media);
  });
  ua.start();
}

function call() {
  const target = $('target').value;
  const uri = target.includes('@') ? `sip:${target}` : `sip:${target}@${$('domain').value}`;
  attach(ua.call(uri, media));
}

$('setup').addEventListener('submit', (e) => { e.preventDefault(); start(); });
$('call').addEventListener('click', call);
$('hangup').addEventListener('click', () => session && session.terminate());
if (params.has('auto')) start();
