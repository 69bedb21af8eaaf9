/**
 * The agent's probes, from its own node: for every binding it holds, a login with exactly the
 * values it delivered (read back from the binding files), reported to the verifier on
 * `mesh.probe.report.<node>.…`; and for every installed provider, whether its endpoint accepts
 * a TCP connection from here, recorded in KV `mesh-reachability` when it changes (the resolver
 * reads it). Probes run every interval (with jitter), for one binding soon after it is
 * delivered, and on request (`mesh.probe.request.<node>`, the verifier's forced checks).
 * Values are never logged.
 */
import { connect as tcpConnect } from "node:net";
import { lstatSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import {
  BUILTIN_SECRET_PROVIDER,
  ErrorCodes,
  Grant,
  ProbeRequest,
  ProviderDoc,
  ReachabilityRecord,
  confirmFailure,
  errorMessage,
  grantId,
  isInboxSubject,
  isValidName,
  keys,
  parseGrantId,
  subjects,
  type CheckResult,
  type ProbeReply,
  type ProbeReport,
  bindingNameOf,
  requirementOfBinding,
  recordJson,
} from "@mesh/shared";
import { listJson, readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import { createAdapter, type LoginResult, type ProviderAdapter } from "@mesh/providers";
import { BINDING_KEY_PATTERN, bindingGeneration, bindingPath } from "./bindings-writer.js";
import { endpointAddress, formatAddress } from "./endpoint-address.js";

/** Default interval between probe rounds. */
export const DEFAULT_PROBE_INTERVAL_MS = 10_000;
/** How long a TCP reachability probe may take. */
export const REACHABILITY_TIMEOUT_MS = 2_000;

/** Options of {@link startProber}. */
export interface ProberOptions {
  store: Store;
  node: string;
  bindingsRoot: string;
  log: Logger;
  /** Between rounds; default {@link DEFAULT_PROBE_INTERVAL_MS}. */
  intervalMs?: number;
  /** Logins in flight at once; default 8. */
  concurrency?: number;
  /** Run at the start of every round, the first at once (the agent writes again what its node lost, restore.ts). */
  beforeRound?: () => Promise<unknown>;
}

/** The running probes of one node's agent. */
export interface Prober {
  /** Probes now, every binding held (or those of `grant`), and returns the reports without publishing them. */
  probeNow(grant?: string): Promise<ProbeReport[]>;
  /** Probes one binding soon (after a delivery) and publishes the report. */
  probeSoon(module: string, part: string, requirement: string): void;
  /** Stops the rounds and the request handler; waits for a round in work. Idempotent. */
  stop(): Promise<void>;
}

/** A binding held on this node: `<root>/<module>/<part>/<binding>`, the binding of `requirement`. */
interface Held {
  module: string;
  part: string;
  requirement: string;
  /** Its directory: the requirement's name, or `identity` for the part's identity. */
  binding: string;
}

/** The outcome of a login from this node as a probe result. Pure. */
export function probeResultOf(
  login: LoginResult,
  ctx: { provider: string; node: string; generation: number; intervalMs: number; now: Date },
): CheckResult & { intervalMs: number } {
  const base = { generation: ctx.generation, intervalMs: ctx.intervalMs, observedAt: ctx.now.toISOString() };
  if (login.ok) return { ...base, ok: true, message: `generation ${ctx.generation} logs in at provider ${ctx.provider} from node ${ctx.node}` };
  const reason = login.reason === "unreachable" ? "ProviderUnreachable" : login.reason === "missing" ? "ResourceMissing" : "CredentialRejected";
  const message =
    login.reason === "unreachable"
      ? `provider ${ctx.provider} cannot be reached from node ${ctx.node}: ${login.message}`
      : `provider ${ctx.provider} refuses generation ${ctx.generation} as delivered to node ${ctx.node}: ${login.message}`;
  return { ...base, ok: false, reason, message };
}

/** Whether a reachability record must be written: none yet, or what it says changed. Pure. */
export function reachabilityChanged(prev: ReachabilityRecord | undefined, next: Omit<ReachabilityRecord, "since">): boolean {
  return !prev || prev.reachable !== next.reachable || prev.address !== next.address || prev.message !== next.message;
}

/** Whether `host:port` accepts a TCP connection within `timeoutMs`; the error's text when not. */
export function tryConnect(host: string, port: number, timeoutMs = REACHABILITY_TIMEOUT_MS): Promise<{ ok: true } | { ok: false; message: string }> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host, port });
    const done = (r: { ok: true } | { ok: false; message: string }) => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on("error", () => {});
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => done({ ok: false, message: `no answer from ${formatAddress({ host, port })} within ${timeoutMs} ms` }), timeoutMs);
    socket.once("connect", () => done({ ok: true }));
    socket.once("error", (e: NodeJS.ErrnoException) =>
      done({ ok: false, message: e.code ? `${e.code} connecting to ${formatAddress({ host, port })}` : errorMessage(e) }),
    );
  });
}

function isDir(p: string): boolean {
  try {
    return lstatSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Every binding under `root` (module/part/requirement symlinks), sorted. */
function heldBindings(root: string): Held[] {
  const out: Held[] = [];
  const names = (dir: string) => {
    try {
      return readdirSync(dir).filter(isValidName).sort();
    } catch {
      return [];
    }
  };
  for (const module of names(root)) {
    if (!isDir(join(root, module))) continue;
    for (const part of names(join(root, module))) {
      if (!isDir(join(root, module, part))) continue;
      for (const binding of names(join(root, module, part))) {
        if (bindingGeneration(root, module, part, binding) !== undefined) out.push({ module, part, requirement: requirementOfBinding(part, binding), binding });
      }
    }
  }
  return out;
}

/** The values of a binding as the part reads them; undefined when it cannot be read. */
function readBinding(root: string, h: Held): Record<string, string> | undefined {
  const dir = bindingPath(root, h.module, h.part, h.binding);
  try {
    const values: Record<string, string> = {};
    for (const key of readdirSync(dir)) if (BINDING_KEY_PATTERN.test(key)) values[key] = readFileSync(join(dir, key), "utf8");
    return values;
  } catch {
    return undefined;
  }
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function eachLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

/** Starts the probes of `opts.node`; see the file's doc comment. */
export function startProber(opts: ProberOptions): Prober {
  const { store, node, bindingsRoot: root, log } = opts;
  const intervalMs = opts.intervalMs ?? DEFAULT_PROBE_INTERVAL_MS;
  const concurrency = opts.concurrency ?? 8;
  // Login-only adapters (no admin credential), one per provider and kind, rebuilt when the endpoint changes.
  const adapters = new Map<string, { endpoint: string; adapter: ProviderAdapter }>();
  let stopped = false;
  /** The generation each held binding (`module/part/requirement`) last failed its probe with: a failure seen again is not confirmed again. */
  const failing = new Map<string, number>();
  const heldKey = (h: Held) => `${h.module}/${h.part}/${h.requirement}`;

  const adapterFor = (kind: Grant["kind"], provider: string, doc: ProviderDoc | undefined): ProviderAdapter => {
    const endpoint = doc?.endpoint ?? "builtin://secret";
    const k = `${provider}/${kind}`;
    const cur = adapters.get(k);
    if (cur && cur.endpoint === endpoint) return cur.adapter;
    if (cur) void cur.adapter.close();
    const adapter = createAdapter(kind, { name: provider, node: doc?.node ?? "builtin", endpoint, ...(doc?.options ? { options: doc.options } : {}) });
    adapters.set(k, { endpoint, adapter });
    return adapter;
  };

  const probeOne = async (h: Held, providers: Map<string, ProviderDoc | undefined>): Promise<ProbeReport | undefined> => {
    const grant = (await readJson(store.kv.grants, keys.grant(h.module, h.requirement), Grant))?.value;
    if (!grant?.provider || !grant.targets.some((t) => t.node === node && t.part === h.part)) return undefined;
    const generation = bindingGeneration(root, h.module, h.part, h.binding);
    const values = readBinding(root, h);
    if (!generation || !values) return undefined;
    if (!providers.has(grant.provider)) {
      providers.set(
        grant.provider,
        grant.provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, grant.provider, ProviderDoc))?.value,
      );
    }
    const doc = providers.get(grant.provider);
    if (grant.provider !== BUILTIN_SECRET_PROVIDER && !doc) return undefined;
    const adapter = adapterFor(grant.kind, grant.provider, doc);
    const held = heldKey(h);
    // A binding that was logging in fails only when a second login a moment later agrees (a server reloading refuses one for milliseconds).
    const login = await confirmFailure(
      async (): Promise<LoginResult> => {
        try {
          return await adapter.login({ bindings: values });
        } catch (e) {
          return { ok: false, reason: "unreachable", message: errorMessage(e) };
        }
      },
      (l) => !l.ok,
      failing.get(held) !== generation,
    );
    if (login.ok) failing.delete(held);
    else failing.set(held, generation);
    const result = probeResultOf(login, { provider: grant.provider, node, generation, intervalMs, now: new Date() });
    return { grant: grantId(h.module, h.requirement), node, part: h.part, result };
  };

  const probeBindings = async (held: Held[]): Promise<ProbeReport[]> => {
    const providers = new Map<string, ProviderDoc | undefined>();
    const reports = await eachLimited(held, concurrency, (h) =>
      probeOne(h, providers).catch((e: unknown) => {
        log.warn({ grant: grantId(h.module, h.requirement), part: h.part, err: e }, "probe failed");
        return undefined;
      }),
    );
    return reports.filter((r): r is ProbeReport => r !== undefined);
  };

  const publish = (reports: ProbeReport[]) => {
    // A probe that ends after stop() (or after the connection closed) has no one to tell.
    if (stopped || store.nc.isClosed()) return;
    for (const r of reports) {
      const id = parseGrantId(r.grant)!;
      try {
        store.nc.publish(subjects.probeReport(node, id.module, r.part, id.requirement), JSON.stringify(r));
      } catch (e) {
        log.debug({ grant: r.grant, err: e }, "probe report not published");
      }
    }
  };
  const soon = new Set<Promise<void>>();

  const probeReachability = async () => {
    const providers = await listJson(store.kv.providers, ProviderDoc);
    for (const { value: p } of providers) {
      if (!p.installed) continue;
      const addr = endpointAddress(p.endpoint);
      if (!addr) continue;
      const r = await tryConnect(addr.host, addr.port);
      const next = {
        node,
        provider: p.name,
        address: formatAddress(addr),
        reachable: r.ok,
        message: r.ok ? "" : `provider ${p.name} at ${formatAddress(addr)} does not accept connections from node ${node} (${r.message})`,
      };
      const key = keys.reachability(node, p.name);
      const prev = await readJson(store.kv.reachability, key, ReachabilityRecord).catch(() => undefined);
      if (!reachabilityChanged(prev?.value, next)) continue;
      await store.kv.reachability.put(key, recordJson({ ...next, since: new Date().toISOString() } satisfies ReachabilityRecord));
      if (r.ok) log.info({ provider: p.name, address: next.address }, `provider ${p.name} is reachable from node ${node}`);
      else log.warn({ provider: p.name, address: next.address, why: r.message }, next.message);
    }
  };

  let round: Promise<void> = Promise.resolve();
  const runRound = () => {
    round = (async () => {
      try {
        await opts.beforeRound?.();
        await probeReachability();
        const held = heldBindings(root);
        publish(await probeBindings(held));
        const still = new Set(held.map(heldKey));
        for (const k of failing.keys()) if (!still.has(k)) failing.delete(k);
      } catch (e) {
        log.warn({ err: e }, "probe round failed; the next one tries again");
      }
    })();
    return round;
  };
  let timer: NodeJS.Timeout | undefined;
  const loop = () => {
    if (stopped) return;
    // Jitter, so that the agents of many nodes do not probe in step.
    timer = setTimeout(() => void runRound().finally(loop), Math.round(intervalMs * (0.9 + 0.2 * Math.random())));
    timer.unref();
  };
  void runRound().finally(loop);

  const sub = store.nc.subscribe(subjects.probeRequest(node));
  const serving = (async () => {
    for await (const m of sub) {
      // Answers go to inboxes only (serveJson in @mesh/shared says why).
      if (!isInboxSubject(m.reply)) continue;
      void (async () => {
        let reply: ProbeReply;
        try {
          const req = ProbeRequest.parse(m.data.length ? m.json() : {});
          const id = req.grant === undefined ? undefined : parseGrantId(req.grant);
          if (req.grant !== undefined && !id) throw new Error(`not a grant id: ${JSON.stringify(req.grant)}`);
          const held = heldBindings(root).filter((h) => !id || (h.module === id.module && h.requirement === id.requirement));
          reply = { ok: true, reports: await probeBindings(held) };
        } catch (e) {
          reply = { ok: false, error: { code: ErrorCodes.InvalidRequest, message: errorMessage(e), retryable: false } };
        }
        try {
          m.respond(JSON.stringify(reply));
        } catch {
          // the connection closed meanwhile: nobody waits for the answer
        }
      })();
    }
  })();

  return {
    probeNow(grant) {
      const id = grant === undefined ? undefined : parseGrantId(grant);
      return probeBindings(heldBindings(root).filter((h) => !id || (h.module === id.module && h.requirement === id.requirement)));
    },
    probeSoon(module, part, requirement) {
      if (stopped) return;
      const p = probeBindings([{ module, part, requirement, binding: bindingNameOf(part, requirement) }]).then(publish, (e: unknown) =>
        log.warn({ err: e }, "probe after delivery failed"),
      );
      soon.add(p);
      void p.finally(() => soon.delete(p));
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      await sub.drain().catch(() => undefined);
      await serving.catch(() => undefined);
      await round.catch(() => undefined);
      await Promise.allSettled([...soon]);
      await Promise.all([...adapters.values()].map((a) => a.adapter.close().catch(() => undefined)));
      adapters.clear();
    },
  };
}
