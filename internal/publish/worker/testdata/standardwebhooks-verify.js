// Verifies webhook calls captured from the worker with the official
// standardwebhooks library (the Standard Webhooks reference implementation for
// JavaScript), as a receiver would. CASES names a JSON file holding
// [{name, secret, headers, body (base64 of the exact bytes)}]; prints
// {name: "ok" or the library's error message}.
const fs = require("fs");
const { Webhook } = require("standardwebhooks");

const cases = JSON.parse(fs.readFileSync(process.env.CASES, "utf8"));
const out = {};
for (const c of cases) {
  try {
    new Webhook(c.secret).verify(Buffer.from(c.body, "base64"), c.headers);
    out[c.name] = "ok";
  } catch (e) {
    out[c.name] = String(e.message);
  }
}
console.log(JSON.stringify(out));
