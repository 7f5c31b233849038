// The sipsec browser phone: register over WebSocket, call, answer or
// decline, mute, send DTMF, hang up.
//
// A person uses the buttons. The tests drive the page through the same
// buttons with ?click=register,answer (each id clicked, in order, once it
// is shown and enabled), or run it by itself with ?auto=answer or
// ?auto=call&target=bob. With ?report=URL the page posts what happened
// there as JSON lines: registered, incoming, state, confirmed, media
// (RTCPeerConnection statistics), dtmf, ended, failed, error.
'use strict';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
for (const k of ['server', 'domain', 'user', 'password', 'target']) {
  if (params.has(k)) $(k).value = params.get(k);
}

function log(line) {
  const box = $('log');
  box.textContent += new Date().toISOString().slice(11, 23) + ' ' + line + '\n';
  box.scrollTop = box.scrollHeight;
}

function report(event, extra) {
  const body = JSON.stringify(Object.assign({ event, user: $('user').value }, extra || {}));
  console.log(body);
  const url = params.get('report');
  if (url) fetch(url, { method: 'POST', body, keepalive: true }).catch(() => {});
}

function setState(text) {
  $('state').textContent = text;
  log(text);
  report('state', { text });
}

function showError(text) {
  $('error').textContent = text;
  log('error: ' + text);
  report('error', { message: text });
}

let ua = null;
let session = null;
const media = { mediaConstraints: { audio: true, video: false }, pcConfig: { iceServers: [] } };

// Inbound and outbound RTP counted by the browser's own WebRTC stack.
async function mediaStats(pc) {
  const stats = await pc.getStats();
  const out = { packetsReceived: 0, packetsSent: 0, bytesReceived: 0, totalAudioEnergy: 0 };
  stats.forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'audio') {
      out.packetsReceived += s.packetsReceived || 0;
      out.bytesReceived += s.bytesReceived || 0;
      out.totalAudioEnergy += s.totalAudioEnergy || 0;
      out.totalSamplesReceived = (out.totalSamplesReceived || 0) + (s.totalSamplesReceived || 0);
      out.audioLevel = Math.max(out.audioLevel || 0, s.audioLevel || 0);
      out.codec = s.codecId;
    }
    if (s.type === 'outbound-rtp' && s.kind === 'audio') out.packetsSent += s.packetsSent || 0;
    if (s.type === 'transport') out.dtlsState = s.dtlsState;
  });
  return out;
}

// What a failed call's cause means to a person.
function explain(cause, status) {
  if (cause === 'User Denied Media Access') {
    return 'The microphone is not allowed: allow it for this page in the browser\'s site settings, then call again.';
  }
  if (status === 430) return 'The callee\'s phone is no longer connected.';
  if (status === 404) return 'Nobody is registered under that name.';
  return `Call failed: ${cause}${status ? ' (' + status + ')' : ''}.`;
}

function idle() {
  session = null;
  $('hangup').disabled = true;
  $('incoming').hidden = true;
  $('incall').hidden = true;
  $('mute').textContent = 'Mute';
  $('call').disabled = !(ua && ua.isRegistered());
}

function attach(s) {
  session = s;
  $('hangup').disabled = false;
  $('call').disabled = true;
  s.on('peerconnection', (e) => {
    e.peerconnection.addEventListener('track', (t) => { $('remote').srcObject = t.streams[0]; });
  });
  s.on('progress', () => { if (s.direction === 'outgoing') setState('Ringing…'); });
  s.on('confirmed', () => {
    $('incoming').hidden = true;
    $('incall').hidden = false;
    setState(`In a call with ${s.remote_identity.uri.toString()}`);
    report('confirmed', { direction: s.direction });
    // Let media flow, then report what the browser received.
    setTimeout(async () => {
      if (!s.connection) return;
      report('media', await mediaStats(s.connection));
      if (params.get('auto') === 'call') s.terminate();
    }, Number(params.get('talk') || 3000));
  });
  s.on('ended', (e) => {
    report('ended', { cause: e.cause, originator: e.originator });
    setState(`Call ended (${e.originator === 'local' ? 'you hung up' : 'the other side hung up'})`);
    idle();
  });
  s.on('failed', (e) => {
    const status = e.message && e.message.status_code;
    report('failed', { cause: e.cause, originator: e.originator, status });
    if (e.originator === 'local' && e.cause === 'Rejected') {
      setState('Call declined');
    } else if (e.cause === 'Canceled') {
      setState('Call canceled');
    } else {
      setState('Call failed');
      showError(explain(e.cause, status));
    }
    idle();
  });
}

function start() {
  if (typeof JsSIP === 'undefined') {
    showError('JsSIP did not load (web/phone/vendor/jssip.js is missing): run ./setup.sh, which bundles it, then reload this page.');
    $('register').disabled = true;
    return;
  }
  $('error').textContent = '';
  if (ua) ua.stop();
  const domain = $('domain').value;
  let socket;
  try {
    socket = new JsSIP.WebSocketInterface($('server').value);
  } catch (e) {
    showError(`Server: ${e.message}`);
    return;
  }
  ua = new JsSIP.UA({
    sockets: [socket],
    uri: `sip:${$('user').value}@${domain}`,
    password: $('password').value,
    register: true,
    session_timers: false,
  });
  setState('Registering…');
  ua.on('registered', () => {
    report('registered');
    setState(`Registered as ${$('user').value}@${domain}`);
    if (!session) $('call').disabled = false;
    if (params.get('auto') === 'call') call();
  });
  ua.on('registrationFailed', (e) => {
    report('registrationFailed', { cause: e.cause });
    setState('Not registered');
    showError(`Registration failed: ${e.cause}`);
  });
  ua.on('disconnected', () => log('WebSocket disconnected'));
  ua.on('newRTCSession', (e) => {
    if (e.originator !== 'remote') return;
    if (session) {
      e.session.terminate({ status_code: 486, reason_phrase: 'Busy Here' });
      return;
    }
    attach(e.session);
    const from = e.request.from.uri.toString();
    $('caller').textContent = from;
    $('incoming').hidden = false;
    setState(`Incoming call from ${from}`);
    report('incoming', { from });
    if (params.get('auto') === 'answer') answer();
  });
  ua.start();
}

function call() {
  const target = $('target').value;
  const uri = target.includes('@') ? `sip:${target}` : `sip:${target}@${$('domain').value}`;
  setState(`Calling ${uri}…`);
  attach(ua.call(uri, media));
}

function answer() {
  if (!session) return;
  $('incoming').hidden = true;
  setState('Answering…');
  session.answer(media);
}

function decline() {
  if (session) session.terminate({ status_code: 603, reason_phrase: 'Decline' });
}

function toggleMute() {
  if (!session) return;
  if (session.isMuted().audio) {
    session.unmute({ audio: true });
    $('mute').textContent = 'Mute';
    log('microphone on');
  } else {
    session.mute({ audio: true });
    $('mute').textContent = 'Unmute';
    log('microphone muted');
  }
  report('muted', { muted: session.isMuted().audio });
}

for (const key of '123456789*0#') {
  const b = document.createElement('button');
  b.id = 'dtmf-' + (key === '*' ? 'star' : key === '#' ? 'hash' : key);
  b.textContent = key;
  b.addEventListener('click', () => {
    if (!session) return;
    session.sendDTMF(key);
    log(`sent DTMF ${key}`);
    report('dtmf', { tone: key });
  });
  $('keypad').appendChild(b);
}

$('setup').addEventListener('submit', (e) => { e.preventDefault(); start(); });
$('call').addEventListener('click', call);
$('hangup').addEventListener('click', () => session && session.terminate());
$('answer').addEventListener('click', answer);
$('decline').addEventListener('click', decline);
$('mute').addEventListener('click', toggleMute);

// ?click=a,b,c: click each element, in order, once it is shown and
// enabled (the tests press the buttons a person would).
const clicks = (params.get('click') || '').split(',').filter(Boolean);
function clickNext() {
  if (clicks.length === 0) return;
  const b = $(clicks[0]);
  if (b && !b.disabled && b.offsetParent !== null) {
    clicks.shift();
    b.click();
  }
  setTimeout(clickNext, 100);
}
clickNext();
if (params.has('auto')) start();
if (typeof JsSIP === 'undefined') start();
