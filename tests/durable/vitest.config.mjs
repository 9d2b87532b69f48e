// The suite's 0.3.6 command line finds no test files: vitest runs it
// through this file instead.
export default { test: { include: ['conformance.test.mjs'], testTimeout: 30000 } };
