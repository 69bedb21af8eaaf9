#!/usr/bin/env node
/**
 * mesh-agent: the agent of one node.
 *
 *     mesh-agent --node NAME [--bindings DIR] [--allow-hook NAME=COMMAND]... [--hook-user USER]
 *
 * Environment: `NATS_URL` (default nats://127.0.0.1:4222), `MESH_NODE` (or `--node`),
 * `MESH_BINDINGS_ROOT` (or `--bindings`, default /var/lib/mesh/bindings), `MESH_LOG_LEVEL`,
 * `MESH_PROBE_INTERVAL` (default `10s`: how often the agent logs in with what it delivered and
 * checks that providers answer from this node), `MESH_ALLOW_HOOKS` (or `--allow-hook`, which
 * wins: `NAME=COMMAND;NAME=COMMAND`, the hooks a part's `onRotate` may name; COMMAND is split
 * on whitespace and run without a shell), `MESH_HOOK_USER` (or `--hook-user`, default
 * `nobody`: who hooks run as).
 * Exits 2 on a usage error, 1 when it cannot start, 0 after SIGINT/SIGTERM.
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_BINDINGS_ROOT, NAME_RULE, errorMessage, isValidName, meshVersion, parseTimerDuration } from "@mesh/shared";
import { runService, serviceHelp } from "@mesh/shared/service";
import { observed } from "@mesh/telemetry";
import { startAgent } from "./agent.js";
import { allowedHooksOf, microServiceName, type AllowedHooks } from "@mesh/shared";
import { resolveHookPrograms } from "./hook-runner.js";

const USAGE =
  "usage: mesh-agent --node NAME [--bindings DIR] [--allow-hook NAME=COMMAND]... [--hook-user USER]   (or MESH_NODE, MESH_BINDINGS_ROOT, MESH_ALLOW_HOOKS, MESH_HOOK_USER; NATS_URL)";

function usageError(message: string): never {
  process.stderr.write(`mesh-agent: ${message}\n${USAGE}\n`);
  process.exit(2);
}

let args: { node?: string; bindings?: string; "allow-hook"?: string[]; "hook-user"?: string; help?: boolean; version?: boolean };
try {
  args = parseArgs({
    options: {
      node: { type: "string" },
      bindings: { type: "string" },
      "allow-hook": { type: "string", multiple: true },
      "hook-user": { type: "string" },
      help: { type: "boolean", short: "h" },
      version: { type: "boolean" },
    },
    strict: true,
    allowPositionals: false,
  }).values;
} catch (e) {
  usageError(errorMessage(e));
}
if (args.help) {
  process.stdout.write(serviceHelp("agent", USAGE));
  process.exit(0);
}
if (args.version) {
  process.stdout.write(`${meshVersion(import.meta.url) ?? "unknown"}\n`);
  process.exit(0);
}
const node = args.node ?? process.env.MESH_NODE;
if (!node) usageError("no node name: give --node NAME or set MESH_NODE to the name this node has in the manifests");
if (!isValidName(node)) usageError(`node name ${JSON.stringify(node)} ${NAME_RULE}`);
const bindingsRoot = resolve(args.bindings ?? process.env.MESH_BINDINGS_ROOT ?? DEFAULT_BINDINGS_ROOT);

// MESH_PROBE_INTERVAL: between probes of the bindings held here and of providers' reachability (default 10s).
let probeIntervalMs: number | undefined;
try {
  probeIntervalMs = process.env.MESH_PROBE_INTERVAL ? parseTimerDuration(process.env.MESH_PROBE_INTERVAL, "MESH_PROBE_INTERVAL") : undefined;
} catch (e) {
  usageError(errorMessage(e));
}
let hooks: AllowedHooks;
try {
  // Checked here too, before connecting: a hook whose program is not on this node is a usage error.
  hooks = resolveHookPrograms(allowedHooksOf(args["allow-hook"], process.env));
} catch (e) {
  usageError(errorMessage(e));
}
const hookUser = args["hook-user"] ?? (process.env.MESH_HOOK_USER || undefined);
await runService(
  "agent",
  observed("mesh-agent", meshVersion(import.meta.url), ({ store, log }) =>
    startAgent({ store, node, bindingsRoot, log, hooks, ...(hookUser ? { hookUser } : {}), ...(probeIntervalMs ? { probeIntervalMs } : {}) }),
  ),
  undefined,
  { name: microServiceName({ agent: node }), metadata: { node } },
);
