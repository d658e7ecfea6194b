'use strict';
// Drives npm `fluent-logger` (fluent/fluent-logger-node): sends COUNT events
// to a Forward server and waits for every callback (the ack, with --ack).
const { createFluentSender, EventTime } = require('fluent-logger');
const common = require('./common');

async function main() {
  const args = common.parseCommandLine(['Message', 'PackedForward', 'CompressedPackedForward']);
  const started = process.hrtime.bigint();
  const summary = {
    client: 'fluent-logger', version: require('fluent-logger/package.json').version,
    mode: args.mode, tag: args.tag, count: args.count, ack: args.ack, tls: !!args.tlsCa,
    sent: 0, acked: args.ack ? 0 : null, seconds: null, errors: [],
  };
  common.deadline(args.timeout, summary);
  const options = {
    host: args.host,
    port: args.port,
    eventMode: args.mode,
    requireAckResponse: args.ack,
    ackResponseTimeout: args.ackTimeout,
    flushInterval: 10,
    enableReconnect: false,
    internalLogger: { info() {}, error: (...a) => process.stderr.write(a.join(' ') + '\n') },
  };
  if (args.sharedKey !== undefined) {
    options.security = {
      clientHostname: args.hostname, sharedKey: args.sharedKey,
      username: args.username, password: args.password,
    };
  }
  if (args.tlsCa) {
    options.tls = true;
    options.tlsOptions = { ca: args.tlsCa };
  }
  const sender = createFluentSender(null, options);
  sender.on('error', (err) => {
    summary.errors.push(String(err && err.message || err));
    common.finish(summary);
  });

  for (let start = 0; start < args.count; start += args.batch) {
    const end = Math.min(args.count, start + args.batch);
    const pending = [];
    for (let i = start; i < end; i++) {
      const [sec, nsec] = common.eventTime(i);
      pending.push(new Promise((resolve) => {
        sender.emit(args.tag, common.eventRecord(i), new EventTime(sec, nsec), (err) => {
          if (err) summary.errors.push(String(err.message || err));
          else if (args.ack) summary.acked++;
          resolve();
        });
      }));
      summary.sent++;
    }
    await Promise.all(pending);
    if (summary.errors.length) break;
  }
  await new Promise((resolve) => sender.end(null, null, resolve));
  summary.seconds = Number(process.hrtime.bigint() - started) / 1e9;
  common.finish(summary);
}

main().catch((err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); });
