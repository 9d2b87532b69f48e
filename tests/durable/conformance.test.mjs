// The Durable Streams server conformance suite, as its package ships it,
// against the server at DS_URL (scripts/durable-conformance starts it).
import { runConformanceTests } from '@durable-streams/server-conformance-tests';

const baseUrl = process.env.DS_URL;
if (!baseUrl) throw new Error('DS_URL must name the server under test');

// With DS_TENANT set, the suite judges /v1/tenants/$DS_TENANT/streams/
// instead of /v1/stream/, where its paths are written: every request it
// makes (by itself or through the protocol's client, both through the
// global fetch) goes to the tenant route, its Stream-Forked-From names
// the source in the tenant route's form, and the Location it checks
// against the path it created comes back in the form it wrote.
const tenant = process.env.DS_TENANT;
if (tenant) {
  const legacyPath = '/v1/stream/';
  const tenantPath = `/v1/tenants/${encodeURIComponent(tenant)}/streams/`;
  const legacy = baseUrl + legacyPath;
  const under = baseUrl + tenantPath;
  const fetchLegacy = globalThis.fetch;
  globalThis.fetch = async (input, init = {}) => {
    const request = input instanceof Request ? input : null;
    let url = request ? request.url : String(input);
    if (url.startsWith(legacy)) url = under + url.slice(legacy.length);
    const headers = new Headers(init.headers ?? request?.headers);
    const from = headers.get('Stream-Forked-From');
    if (from?.startsWith(legacyPath)) headers.set('Stream-Forked-From', tenantPath + from.slice(legacyPath.length));
    const res = await fetchLegacy(request ? new Request(url, request) : url, { ...init, headers });
    const location = res.headers.get('Location');
    if (res.status !== 201 || !location?.startsWith(under)) return res;
    const mapped = new Headers(res.headers);
    mapped.set('Location', legacy + location.slice(under.length));
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers: mapped });
  };
}

runConformanceTests({ baseUrl, longPollTimeoutMs: 20000 });
