// amqplib.js: reads COUNT messages from QUEUE (bound to a posting service's
// exchange) with amqplib, and checks each against the AsyncAPI document the
// service serves: routing key, headers, value, and the AMQP properties the
// document's RabbitMQ channel promises. Prints one JSON line per message;
// exits 1 when a message breaks the contract, 2 when fewer than COUNT came
// within TIMEOUT_MS.
//
// env: AMQP_URL, QUEUE, ASYNCAPI_URL, COUNT, TIMEOUT_MS.
'use strict';
const amqp = require('amqplib');
const contract = require('./contract');

async function main() {
  const { AMQP_URL, QUEUE, ASYNCAPI_URL } = process.env;
  const count = Number(process.env.COUNT);
  const timeout = Number(process.env.TIMEOUT_MS || 60000);
  const c = await contract.load(ASYNCAPI_URL);
  const conn = await amqp.connect(AMQP_URL);
  const ch = await conn.createChannel();
  let seen = 0, bad = 0, finish;
  const done = new Promise((resolve) => { finish = resolve; });
  await ch.consume(QUEUE, (msg) => {
    const p = msg.properties;
    const headers = {};
    for (const [k, v] of Object.entries(p.headers || {})) headers[k] = Buffer.isBuffer(v) ? v.toString('utf8') : v;
    let value = null;
    try { value = JSON.parse(msg.content.toString('utf8')); } catch (e) { /* reported below */ }
    const problems = value === null ? ['value is not JSON'] : contract.check(c, msg.fields.routingKey, headers, value);
    const want = { contentType: 'application/json', deliveryMode: 2, messageId: headers['event-id'], type: headers['event-type'] };
    for (const [k, v] of Object.entries(want)) if (p[k] !== v) problems.push(`property ${k} is ${JSON.stringify(p[k])}, want ${JSON.stringify(v)}`);
    if (!Number.isInteger(p.timestamp) || p.timestamp <= 0) problems.push(`property timestamp is ${p.timestamp}`);
    if (p.contentEncoding !== undefined) problems.push(`property contentEncoding is ${p.contentEncoding}, the document says identity (none)`);
    if (problems.length) { bad++; console.error(`message ${p.messageId}: ${problems.join('; ')}`); }
    console.log(JSON.stringify({ key: msg.fields.routingKey, eventType: p.type, eventId: p.messageId,
      action: value && value.action, cloudEventsType: headers.cloudEvents_type }));
    ch.ack(msg);
    if (++seen >= count) finish();
  });
  const timer = setTimeout(finish, timeout);
  await done;
  clearTimeout(timer);
  await conn.close().catch(() => {});
  if (bad) process.exit(1);
  if (seen < count) { console.error(`read ${seen} of ${count} messages within ${timeout} ms`); process.exit(2); }
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(3); });
