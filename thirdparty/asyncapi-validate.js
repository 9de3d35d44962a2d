// asyncapi-validate.js: validates the AsyncAPI document at URL (a running
// service's /asyncapi.json) with @asyncapi/parser. Prints every diagnostic
// as a JSON line ({severity, code, message, path}; severity 0 is an error)
// and exits 1 when there is an error.
'use strict';
const { Parser } = require('@asyncapi/parser');

async function main() {
  const url = process.argv[2];
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
  const text = await res.text();
  const diagnostics = await new Parser().validate(text);
  let errors = 0;
  for (const d of diagnostics) {
    if (d.severity === 0) errors++;
    console.log(JSON.stringify({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
  }
  console.error(`${errors} errors, ${diagnostics.length - errors} other diagnostics`);
  process.exit(errors ? 1 : 0);
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(3); });
