/**
 * Rotation on a schedule: a requirement's `rotate: { every: 30d }` rotates its grant when its
 * current generation is that old, and a grant whose credential expires by itself (its
 * resource's `expires`, a NATS user JWT's) is rotated once two thirds of that credential's
 * life have passed, schedule or not, so no holder is cut off by an expiry. A grant whose
 * bindings say to reach its provider's server otherwise than the provider's document says now
 * (it gained `tls:`, dropped it, or names another bundle) is rotated too, so its holders get
 * bindings made by the document as it is. Level-triggered: every check reads the manifests, the
 * providers and the grants and asks for the rotations that are due; a rotation already running
 * is left alone.
 */
import { CredentialRecord, trustsOf } from "@mesh/providers";
import {
  Grant,
  ModuleDoc,
  ProviderDoc,
  Rotation,
  TLS_PROVIDER_KINDS,
  isMeshError,
  isRotationRunning,
  isTrue,
  keys,
  parseDuration,
  servedByNats,
  type RotateRequest,
} from "@mesh/shared";
import { entryJson, listJson, readJson, type Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";

/**
 * True when a generation made at `since` is due for rotation under an `every` of `everyMs` at
 * `now`. Pure.
 */
export function isDue(since: Date | undefined, everyMs: number, now: Date): boolean {
  return since !== undefined && now.getTime() - since.getTime() >= everyMs;
}

/** The share of an expiring credential's life after which its grant is rotated. */
export const EXPIRY_ROTATE_AT = 2 / 3;

/**
 * True when a credential in use since `since` that expires at `expires` is due for rotation at
 * `now`: two thirds of its life have passed (or it has no life left). Pure.
 */
export function isExpiring(since: Date | undefined, expires: Date, now: Date): boolean {
  const start = since && since < expires ? since.getTime() : expires.getTime();
  return now.getTime() >= start + (expires.getTime() - start) * EXPIRY_ROTATE_AT;
}

/**
 * Why grant `g`'s bindings no longer say how to reach its provider `p`'s server as `p` says now,
 * or undefined: `p` says `tls:` and the bindings were made without it, or with another `tls.ca`
 * (the grant's `resource.trusts` records what they trust), or `p` no longer says it. A bundle
 * of `tls: { mesh: true }` is kept in step by `meshctl ca rotate`; a NATS provider's bundle is
 * its `options.caFile`, outside `tls:`. Pure.
 */
export function outdatedTls(g: Grant, p: ProviderDoc | undefined): string | undefined {
  if (!p || g.provider !== p.name || (g.resource.provider !== undefined && g.resource.provider !== p.name)) return undefined;
  if (!TLS_PROVIDER_KINDS.includes(g.kind) || servedByNats(g.kind, p.endpoint)) return undefined;
  const had = g.resource.trusts;
  if (!p.tls) return had ? `provider ${p.name} no longer says tls, and the bindings say to verify its server` : undefined;
  if (!had) return `provider ${p.name} says tls, and the bindings were made without it`;
  if (p.tls.ca !== undefined) {
    let now: string | undefined;
    try {
      now = trustsOf(p.tls.ca);
    } catch {
      return undefined; // a bundle that cannot be read is the provisioner's to report
    }
    if (now !== had) return `provider ${p.name}'s tls.ca is not the bundle the bindings carry`;
  }
  return undefined;
}

/** When the grant's current generation came into use: its commit, or the credential's creation. */
async function currentSince(store: Store, g: Grant): Promise<Date | undefined> {
  const key = keys.grant(g.module, g.requirement);
  const r = (await readJson(store.kv.rotations, key, Rotation))?.value;
  if (r?.committedAt && r.to === g.generation) return new Date(r.committedAt);
  const e = await store.kv.credentials.get(keys.credential(g.module, g.requirement, g.generation));
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  const rec = CredentialRecord.safeParse(entryJson(e));
  return rec.success ? new Date(rec.data.createdAt) : undefined;
}

/** Checks every `checkMs` and calls `rotate` for each due grant. `stop()` ends it. */
export function startSchedule(opts: { store: Store; log: Logger; checkMs: number; rotate: (req: RotateRequest) => Promise<unknown> }): {
  stop(): void;
  check(): Promise<void>;
} {
  const { store, log } = opts;
  const check = async () => {
    const providers = new Map((await listJson(store.kv.providers, ProviderDoc)).map(({ value: p }) => [p.name, p]));
    for (const { value: m } of await listJson(store.kv.manifests, ModuleDoc)) {
      for (const req of m.requires) {
        const key = keys.grant(m.name, req.name);
        const g = (await readJson(store.kv.grants, key, Grant))?.value;
        if (!g || g.generation === 0) continue;
        const at = g.resource.expires ? new Date(g.resource.expires) : undefined;
        const expires = at && !Number.isNaN(at.getTime()) ? at : undefined;
        // Only a provisioned grant's bindings can be out of date.
        const outdated = isTrue(g.conditions, "Provisioned") ? outdatedTls(g, providers.get(g.provider ?? "")) : undefined;
        if (!req.rotate && !expires && !outdated) continue;
        if (isRotationRunning((await readJson(store.kv.rotations, key, Rotation))?.value)) continue;
        const since = await currentSince(store, g);
        const now = new Date();
        const scheduled = req.rotate !== undefined && isDue(since, parseDuration(req.rotate.every), now);
        const expiring = expires !== undefined && isExpiring(since, expires, now);
        if (!scheduled && !expiring && !outdated) continue;
        try {
          await opts.rotate({ grant: g.id, trigger: "schedule" });
          log.info(
            {
              grant: g.id,
              ...(req.rotate ? { every: req.rotate.every } : {}),
              ...(expiring ? { expires: g.resource.expires } : {}),
              ...(outdated ? { outdated } : {}),
            },
            `scheduled rotation of ${g.id} started${expiring ? ` (its credential expires at ${g.resource.expires})` : outdated ? ` (${outdated})` : ""}`,
          );
        } catch (e) {
          if (!isMeshError(e, "Conflict")) log.warn({ grant: g.id, err: e }, "scheduled rotation could not start");
        }
      }
    }
  };
  let running = false;
  const t = setInterval(() => {
    if (running) return;
    running = true;
    check()
      .catch((e: unknown) => log.warn({ err: e }, "schedule check failed"))
      .finally(() => (running = false));
  }, opts.checkMs);
  t.unref();
  return { stop: () => clearInterval(t), check };
}
