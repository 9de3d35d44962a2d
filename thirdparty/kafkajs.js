// kafkajs.js: reads a posting service's topic with stock kafkajs (no codec
// packages), from the beginning, until COUNT messages came or TIMEOUT_MS
// passed, and checks each against the AsyncAPI document the service serves
// and, with the CloudEvents SDK's Kafka binding, as a CloudEvent.
// Prints one JSON line per message ({partition, offset, key, eventType,
// eventId, action}); exits 1 when a message breaks the contract, 2 when
// fewer than COUNT came, 3 when kafkajs fails (an unreadable batch, for one).
//
// env: BROKERS (comma-separated), TOPIC, ASYNCAPI_URL, COUNT, TIMEOUT_MS.
'use strict';
const { Kafka, logLevel } = require('kafkajs');
const { Kafka: CloudEventsKafka } = require('cloudevents');
const contract = require('./contract');

// cloudEventProblems reads a message with the official CloudEvents SDK's
// Kafka binding (binary mode, the ce_* headers) and validates the event it
// makes; returns its problems, empty when it is a valid CloudEvent whose id
// is the message's event-id.
function cloudEventProblems(key, headers, value) {
  const m = { key, headers, value, body: value };
  try {
    if (!CloudEventsKafka.isEvent(m)) return ['CloudEvents: no ce_id header'];
    const ev = CloudEventsKafka.toEvent(m);
    ev.validate();
    return ev.id === headers['event-id'] ? [] : [`CloudEvents: id ${ev.id} is not event-id ${headers['event-id']}`];
  } catch (e) {
    return [`CloudEvents: ${e.message} ${JSON.stringify(e.errors || '')}`];
  }
}

async function main() {
  const { BROKERS, TOPIC, ASYNCAPI_URL } = process.env;
  const count = Number(process.env.COUNT);
  const timeout = Number(process.env.TIMEOUT_MS || 60000);
  const c = await contract.load(ASYNCAPI_URL);
  const kafka = new Kafka({ clientId: 'kafkajs-check', brokers: BROKERS.split(','), logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: 'kafkajs-check-' + process.pid + '-' + Date.now() });
  let seen = 0, bad = 0, failure = null;
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  consumer.on(consumer.events.CRASH, (e) => { failure = e.payload.error; finish(); });
  await consumer.connect();
  await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const key = message.key === null ? null : message.key.toString('utf8');
      const headers = {};
      for (const [k, v] of Object.entries(message.headers || {})) headers[k] = Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
      let value = null;
      try { value = JSON.parse(message.value.toString('utf8')); } catch (e) { /* reported below */ }
      const problems = value === null ? ['value is not JSON'] : contract.check(c, key, headers, value);
      problems.push(...cloudEventProblems(key, headers, message.value));
      if (problems.length) { bad++; console.error(`partition ${partition} offset ${message.offset}: ${problems.join('; ')}`); }
      console.log(JSON.stringify({ partition, offset: message.offset, key, eventType: headers['event-type'],
        eventId: headers['event-id'], action: value && value.action }));
      if (++seen >= count) finish();
    },
  });
  const timer = setTimeout(finish, timeout);
  await done;
  clearTimeout(timer);
  await consumer.disconnect().catch(() => {});
  if (failure) { console.error(`kafkajs: ${failure.name}: ${failure.message}`); process.exit(3); }
  if (bad) process.exit(1);
  if (seen < count) { console.error(`read ${seen} of ${count} messages within ${timeout} ms`); process.exit(2); }
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(3); });
