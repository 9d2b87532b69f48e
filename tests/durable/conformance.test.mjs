// The Durable Streams server conformance suite, as its package ships it,
// against the server at DS_URL (scripts/durable-conformance starts it).
import { runConformanceTests } from '@durable-streams/server-conformance-tests';

const baseUrl = process.env.DS_URL;
if (!baseUrl) throw new Error('DS_URL must name the server under test');
runConformanceTests({ baseUrl, longPollTimeoutMs: 20000 });
