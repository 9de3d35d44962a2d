// ajv-requests.js: validates request bodies against the request schemas of
// an OpenAPI 3.1 document with ajv (JSON Schema 2020-12, ECMAScript
// patterns, ajv-formats), as a client generated in JavaScript would.
// argv: the document's file, then a file of cases
// [{"schema": "PostCreate", "body": ...}, ...]. Prints a JSON array with
// each case's verdict (true: the schema accepts the body).
'use strict';
const fs = require('fs');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const doc = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const cases = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const ajv = new Ajv2020({ allErrors: true, strict: false });
addFormats(ajv);
const validators = {};
const verdicts = cases.map(({ schema, body }) => {
  validators[schema] = validators[schema] || ajv.compile(doc.components.schemas[schema]);
  return validators[schema](body);
});
console.log(JSON.stringify(verdicts));
