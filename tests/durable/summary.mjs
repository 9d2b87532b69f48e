// Reads vitest's JSON report and prints the counts and every test that did
// not pass; exits 1 if fewer than DS_MIN_PASSED passed or any failed.
import { readFileSync } from 'node:fs';

const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const min = Number(process.env.DS_MIN_PASSED || 326);
const counts = {};
const notPassed = [];
for (const file of report.testResults) {
  for (const t of file.assertionResults) {
    counts[t.status] = (counts[t.status] || 0) + 1;
    if (t.status !== 'passed') notPassed.push(`${t.status}: ${t.fullName}`);
  }
}
const total = Object.values(counts).reduce((a, b) => a + b, 0);
console.log(`durable streams conformance: ${counts.passed || 0} of ${total} passed`, JSON.stringify(counts));
for (const line of notPassed) console.log('  ' + line);
if ((counts.passed || 0) < min || (counts.failed || 0) > 0) {
  console.error(`fewer than ${min} passed, or some failed`);
  process.exit(1);
}
