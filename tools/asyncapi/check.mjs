// The official AsyncAPI parser on a document: prints each diagnostic as a JSON line, then the
// counts as the last line ({"errors", "warnings", "parsed"}). Usage: node check.mjs FILE
import { readFileSync } from 'node:fs';
import { Parser } from '@asyncapi/parser';

const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(process.argv[2], 'utf8'));
// spectral's severities: 0 error, 1 warning, 2 information, 3 hint
for (const d of diagnostics) {
  console.log(JSON.stringify({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
}
const count = (severity) => diagnostics.filter((d) => d.severity === severity).length;
console.log(JSON.stringify({ errors: count(0), warnings: count(1), parsed: document !== undefined }));
