'use strict';
// What every windvane client driver sends, and its command line.
// The Python side (tests/clients.py: event_msg, event_time_ns) computes the
// same values; keep the two in sync.
const { parseArgs } = require('node:util');
const fs = require('node:fs');

const BASE_SECONDS = 1700000000;
const STEP_NS = 1000123; // event i is at BASE_SECONDS s + i * 1.000123 ms

// Event i's text: ASCII, Latin-1, CJK and a symbol, then 0..49 filler bytes.
function eventMsg(i) {
  return `event ${String(i).padStart(6, '0')} Grüße Köln température °C 温度センサー ✓ ` +
    'xyz'[i % 3].repeat(i % 50);
}

function eventRecord(i) {
  return { seq: i, msg: eventMsg(i), value: i * 0.5 };
}

// [seconds, nanoseconds] of event i (exact: i * STEP_NS < 2**53).
function eventTime(i) {
  const offset = i * STEP_NS;
  return [BASE_SECONDS + Math.floor(offset / 1e9), offset % 1e9];
}

const USAGE = 'usage: HOST PORT TAG COUNT MODE [--ack] [--shared-key KEY] [--hostname NAME] ' +
  '[--username U --password P] [--tls-ca FILE] [--batch N] [--ack-timeout MS] [--timeout S]';

function parseCommandLine(modes) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      ack: { type: 'boolean', default: false },
      'shared-key': { type: 'string' },
      hostname: { type: 'string', default: 'windvane-test-client' },
      username: { type: 'string', default: '' },
      password: { type: 'string', default: '' },
      'tls-ca': { type: 'string' },
      batch: { type: 'string', default: '1000' },
      'ack-timeout': { type: 'string', default: '60000' },
      timeout: { type: 'string', default: '120' },
    },
  });
  if (positionals.length !== 5) fail(USAGE);
  const [host, port, tag, count, mode] = positionals;
  if (!modes.includes(mode)) fail(`unknown mode ${mode}; one of ${modes.join(', ')}`);
  return {
    host,
    port: Number(port),
    tag,
    count: Number(count),
    mode,
    ack: values.ack,
    sharedKey: values['shared-key'],
    hostname: values.hostname,
    username: values.username,
    password: values.password,
    tlsCa: values['tls-ca'] ? fs.readFileSync(values['tls-ca']) : null,
    batch: Math.max(1, Number(values.batch)),
    ackTimeout: Number(values['ack-timeout']),
    timeout: Number(values.timeout),
  };
}

function fail(message) {
  process.stderr.write(message + '\n');
  process.exit(2);
}

// Print the one-line summary and exit: 0 only if every event was sent and,
// with --ack, acknowledged.
let finished = false;
function finish(summary) {
  if (finished) return;
  finished = true;
  const ok = summary.errors.length === 0 && summary.sent === summary.count &&
    (!summary.ack || summary.acked === summary.count);
  summary.ok = ok;
  summary.errors = summary.errors.slice(0, 5);
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(ok ? 0 : 1));
}

// Stop with a failing summary if the run takes longer than `seconds`, or if
// the client leaves nothing to wait for (a closed socket with events neither
// acknowledged nor rejected): Node would otherwise exit 0 in silence.
function deadline(seconds, summary) {
  setTimeout(() => {
    summary.errors.push(`timed out after ${seconds} s`);
    finish(summary);
  }, seconds * 1000).unref();
  process.on('beforeExit', () => {
    summary.errors.push('the client stopped with events neither acknowledged nor rejected');
    finish(summary);
  });
}

module.exports = { eventMsg, eventRecord, eventTime, parseCommandLine, finish, deadline };
