// contract.js: validators built, with ajv, from the AsyncAPI document a
// running posting service serves (GET /asyncapi.json), shared by the scripts
// that read its messages with stock clients (kafkajs.js, amqplib.js).
'use strict';
const Ajv = require('ajv');
const addFormats = require('ajv-formats');

// load fetches the served document and returns, per event type (the
// message's name), ajv validators of its key, headers and value.
async function load(url) {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
  const doc = await res.json();
  // The AsyncAPI Schema format is a superset of JSON Schema draft 07; the
  // AsyncAPI-only keywords the schemas use are none, so strict stays on.
  const ajv = new Ajv({ allErrors: true });
  addFormats(ajv);
  const resolve = (ref) => {
    if (!ref || !ref.$ref || !ref.$ref.startsWith('#/')) throw new Error(`want a local $ref, got ${JSON.stringify(ref)}`);
    return ref.$ref.slice(2).split('/').reduce((at, part) => at[part], doc);
  };
  const byType = {};
  for (const m of Object.values(doc.components.messages)) {
    if (!m.bindings || !m.bindings.kafka) continue; // the webhook's call: no broker message
    byType[m.name] = {
      key: ajv.compile(resolve(m.bindings.kafka.key)),
      headers: ajv.compile(resolve(m.headers)),
      value: ajv.compile(resolve(m.payload)),
    };
  }
  return { doc, byType };
}

// check validates one message (key, headers as strings, value parsed) and
// returns its problems, empty when it keeps the contract.
function check(contract, key, headers, value) {
  const type = headers['event-type'];
  const v = contract.byType[type];
  if (!v) return [`event-type ${JSON.stringify(type)} is no message of the document`];
  const problems = [];
  for (const [part, validate, data] of [['key', v.key, key], ['headers', v.headers, headers], ['value', v.value, value]]) {
    if (!validate(data)) problems.push(`${part}: ${JSON.stringify(validate.errors)}`);
  }
  if (value && headers['event-id'] !== value.eventId) problems.push(`event-id ${headers['event-id']} is not the value's eventId ${value && value.eventId}`);
  if (value && key !== String(value.postId)) problems.push(`key ${key} is not the value's postId ${value && value.postId}`);
  return problems;
}

module.exports = { load, check };
