// client.mjs drives airlock's MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk) and prints what it saw as one JSON object.
//
//   node client.mjs stdio            spawns `airlock mcp` (from PATH)
//   node client.mjs http URL KEY NARROWKEY
//
// Both modes: list the tools, run a command, a call the policy denies
// (create_sandbox under the stored policy "guarded"), a bad argument, and
// a call the policy asks about, held until the test approves it from the
// command line. HTTP adds a narrow key (no sandboxes scope) and a wrong
// key.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, url, key, narrowKey] = process.argv.slice(2);

function transport(k) {
  if (mode === "stdio") {
    return new StdioClientTransport({ command: "airlock", args: ["mcp"], env: process.env, stderr: "inherit" });
  }
  return new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "Bearer " + k } } });
}

async function connect(k) {
  const c = new Client({ name: "airlock-test", version: "1.0.0" });
  await c.connect(transport(k));
  return c;
}

const text = (r) => (r.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
const out = {};
const c = await connect(key);
const tools = await c.listTools();
out.tools = tools.tools.map((t) => ({ name: t.name, readOnly: t.annotations?.readOnlyHint, destructive: t.annotations?.destructiveHint, openWorld: t.annotations?.openWorldHint }));

const ran = await c.callTool({ name: "run_command", arguments: { command: "echo from-ts; exit 4" } });
out.run = { text: text(ran), isError: !!ran.isError, exitCode: ran.structuredContent?.exit_code };

const created = await c.callTool({ name: "create_sandbox", arguments: { policy: "guarded" } });
out.created = text(created);
const guarded = created.structuredContent?.sandbox;
const denied = await c.callTool({ name: "run_command", arguments: { command: "rm -rf /workspace", sandbox: guarded } });
out.denied = { text: text(denied), isError: !!denied.isError };

try {
  await c.callTool({ name: "read_file", arguments: { file: "x" } });
  out.badArg = { error: "no error" };
} catch (e) {
  out.badArg = { code: e.code, message: e.message };
}

// ask: held as an approval until the test approves it with `airlock
// approve`; progress notifications name the approval meanwhile.
const progress = [];
const asked = await c.callTool(
  { name: "run_command", arguments: { command: "ask-me; echo asked-ran", sandbox: guarded } },
  undefined,
  { onprogress: (p) => progress.push(p.message || ""), timeout: 180000, resetTimeoutOnProgress: true },
);
out.asked = { text: text(asked), isError: !!asked.isError, progress };

if (mode === "http") {
  const n = await connect(narrowKey);
  try {
    await n.callTool({ name: "run_command", arguments: { command: "true" } });
    out.narrow = { error: "no error" };
  } catch (e) {
    out.narrow = { code: e.code, message: e.message };
  }
  await n.close();
  try {
    await connect("airlock_wrong_key");
    out.wrongKey = "connected";
  } catch (e) {
    out.wrongKey = String(e.message || e);
  }
}
await c.close();
console.log(JSON.stringify(out));
