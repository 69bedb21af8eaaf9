/**
 * Rotation on a schedule: a requirement's `rotate: { every: 30d }` rotates its grant when its
 * current generation is that old. Level-triggered: every check reads the manifests and the
 * grants and asks for the rotations that are due; a rotation already running is left alone.
 */
import { CredentialRecord } from "@mesh/providers";
import {
  Grant,
  ModuleDoc,
  Rotation,
  errorMessage,
  isMeshError,
  isRotationRunning,
  keys,
  listJson,
  parseDuration,
  readJson,
  type Logger,
  type RotateRequest,
  type Store,
} from "@mesh/shared";

/**
 * True when a generation made at `since` is due for rotation under an `every` of `everyMs` at
 * `now`. Pure.
 */
export function isDue(since: Date | undefined, everyMs: number, now: Date): boolean {
  return since !== undefined && now.getTime() - since.getTime() >= everyMs;
}

/** When the grant's current generation came into use: its commit, or the credential's creation. */
async function currentSince(store: Store, g: Grant): Promise<Date | undefined> {
  const key = keys.grant(g.module, g.requirement);
  const r = (await readJson(store.kv.rotations, key, Rotation))?.value;
  if (r?.committedAt && r.to === g.generation) return new Date(r.committedAt);
  const e = await store.kv.credentials.get(keys.credential(g.module, g.requirement, g.generation));
  if (!e || e.operation !== "PUT" || e.length === 0) return undefined;
  const rec = CredentialRecord.safeParse(e.json());
  return rec.success ? new Date(rec.data.createdAt) : undefined;
}

/** Checks every `checkMs` and calls `rotate` for each due grant. `stop()` ends it. */
export function startSchedule(opts: { store: Store; log: Logger; checkMs: number; rotate: (req: RotateRequest) => Promise<unknown> }): { stop(): void; check(): Promise<void> } {
  const { store, log } = opts;
  const check = async () => {
    for (const { value: m } of await listJson(store.kv.manifests, ModuleDoc)) {
      for (const req of m.requires) {
        if (!req.rotate) continue;
        const key = keys.grant(m.name, req.name);
        const g = (await readJson(store.kv.grants, key, Grant))?.value;
        if (!g || g.generation === 0) continue;
        if (isRotationRunning((await readJson(store.kv.rotations, key, Rotation))?.value)) continue;
        if (!isDue(await currentSince(store, g), parseDuration(req.rotate.every), new Date())) continue;
        try {
          await opts.rotate({ grant: g.id, trigger: "schedule" });
          log.info({ grant: g.id, every: req.rotate.every }, `scheduled rotation of ${g.id} started`);
        } catch (e) {
          if (!isMeshError(e, "Conflict")) log.warn({ grant: g.id, err: errorMessage(e) }, "scheduled rotation could not start");
        }
      }
    }
  };
  let running = false;
  const t = setInterval(() => {
    if (running) return;
    running = true;
    check()
      .catch((e: unknown) => log.warn({ err: errorMessage(e) }, "schedule check failed"))
      .finally(() => (running = false));
  }, opts.checkMs);
  t.unref();
  return { stop: () => clearInterval(t), check };
}
