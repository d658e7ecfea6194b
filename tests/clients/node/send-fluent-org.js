'use strict';
// Drives npm `@fluent-org/logger` (fluent/fluent-logger-forward-node):
// sends COUNT events to a Forward server and waits for every emit() promise
// (which, with --ack, resolves only on the server's ack).
const { FluentClient, EventTime } = require('@fluent-org/logger');
const common = require('./common');

async function main() {
  const args = common.parseCommandLine(['Message', 'Forward', 'PackedForward', 'CompressedPackedForward']);
  const started = process.hrtime.bigint();
  const summary = {
    client: '@fluent-org/logger', version: require('@fluent-org/logger/package.json').version,
    mode: args.mode, tag: args.tag, count: args.count, ack: args.ack, tls: !!args.tlsCa,
    sent: 0, acked: args.ack ? 0 : null, seconds: null, errors: [],
  };
  common.deadline(args.timeout, summary);
  const socket = {
    host: args.host,
    port: args.port,
    timeout: args.timeout * 1000,
    disableReconnect: true,
  };
  if (args.tlsCa) socket.tls = { ca: args.tlsCa };
  const options = { eventMode: args.mode, socket, disableAutoconnect: true };
  if (args.ack) options.ack = { ackTimeout: args.ackTimeout };
  if (args.sharedKey !== undefined) {
    options.security = {
      clientHostname: args.hostname, sharedKey: args.sharedKey,
      username: args.username, password: args.password,
    };
  }
  const client = new FluentClient(null, options);
  client.socketOn('error', (err) => summary.errors.push(String(err && err.message || err)));
  await client.connect();

  for (let start = 0; start < args.count; start += args.batch) {
    const end = Math.min(args.count, start + args.batch);
    const pending = [];
    for (let i = start; i < end; i++) {
      const [sec, nsec] = common.eventTime(i);
      pending.push(client.emit(args.tag, common.eventRecord(i), new EventTime(sec, nsec)).then(
        () => { if (args.ack) summary.acked++; },
        (err) => { summary.errors.push(String(err && err.message || err)); },
      ));
      summary.sent++;
    }
    await Promise.all(pending);
    if (summary.errors.length) break;
  }
  await client.shutdown();
  summary.seconds = Number(process.hrtime.bigint() - started) / 1e9;
  common.finish(summary);
}

main().catch((err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1); });
