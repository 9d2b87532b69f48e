// Runs the Durable Streams reference server (@durable-streams/server) for
// edgeload bench's ds-reference target:
//   node ds-reference.mjs DIR [DATADIR]
// DIR holds node_modules with @durable-streams/server; with DATADIR the
// server is file-backed there (append-only logs, each append fdatasync'd,
// LMDB metadata), else in memory. It listens on a free loopback port and
// prints "ds-reference listening http://127.0.0.1:PORT" on standard error.
import { createRequire } from "node:module"
import path from "node:path"
import { pathToFileURL } from "node:url"

const [dir, dataDir] = process.argv.slice(2)
if (!dir) {
  console.error("usage: node ds-reference.mjs DIR [DATADIR]")
  process.exit(2)
}
const require = createRequire(path.join(path.resolve(dir), "package.json"))
const mod = await import(pathToFileURL(require.resolve("@durable-streams/server")).href)
const DurableStreamTestServer = mod.DurableStreamTestServer ?? mod.default?.DurableStreamTestServer
const server = new DurableStreamTestServer({
  port: 0,
  host: "127.0.0.1",
  ...(dataDir ? { dataDir } : {}),
})
const url = (await server.start()) ?? server.url
console.error(`ds-reference listening ${url} mode=${dataDir ? "file" : "memory"}`)

let stopping = false
const stop = async () => {
  if (stopping) return
  stopping = true
  setTimeout(() => process.exit(0), 5000).unref()
  try {
    await server.stop()
  } finally {
    process.exit(0)
  }
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
