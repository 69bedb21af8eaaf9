/**
 * Taking a grant back once no installed part needs it (packages/shared removal.ts says what
 * and in which order): revoke every generation at the provider (drop the resource, or keep its
 * data and lock its logins), purge the store's values, tell the agents of holders that are no
 * longer targets to remove their bindings, and finally delete the grant (or keep it as
 * retained). Each step is recorded on the grant before the next, and each is idempotent, so a
 * provisioner killed anywhere in it leaves work another one finishes.
 */
import {
  BUILTIN_SECRET_PROVIDER,
  Grant,
  MeshError,
  ProviderDoc,
  dropsResource,
  errorMessage,
  isUnneeded,
  pendingWithdrawals,
  removalDone,
  revocationDue,
  setCondition,
  subjects,
  validAfterRevocation,
  withDeliveredCondition,
  type Condition,
  type Delivery,
} from "@mesh/shared";
import { entryJson, mutateJson, readJson, traceHeaders } from "@mesh/shared/runtime";
import { withAdminSecret, type ProviderAdapter } from "@mesh/providers";
import { PROVISIONER_INSTANCE, type ProvisionDeps, type TakeBackStep } from "./provision-deps.js";

/** TEST HOOK: freezes for good after `step` when the deps say so (the test then SIGKILLs the process). */
async function testPause(deps: ProvisionDeps, step: TakeBackStep): Promise<void> {
  if (deps.testPauseAfter !== step) return;
  deps.log.warn({ step }, "TEST HOOK: the provisioner froze after this step of a take-back");
  deps.onTestPause?.(step);
  await new Promise<never>(() => undefined);
}

/**
 * Does what is due of taking the grant under `key` back. Returns true when the grant is
 * unneeded (the caller provisions nothing then). Throws to be retried (a provider that does
 * not answer keeps the step due, and the grant says why).
 */
export async function takeBack(deps: ProvisionDeps, key: string, grant: Grant): Promise<boolean> {
  const { log } = deps;
  let g = grant;
  if (revocationDue(g)) g = (await revoke(deps, key, g)) ?? g;
  await withdraw(deps, g);
  if (removalDone(g)) await finish(deps, key, g);
  else if (!isUnneeded(g)) return false;
  log.debug({ grant: g.id, holders: pendingWithdrawals(g) }, "taking back");
  return true;
}

/** Revokes every generation at the provider and purges the store's values; records it on the grant. */
async function revoke(deps: ProvisionDeps, key: string, g: Grant): Promise<Grant | undefined> {
  const { store, credentials, adapters, log } = deps;
  const provider = g.resource.provider ?? g.provider;
  const drop = dropsResource(g);
  const glog = log.child({ grant: g.id, provider, generation: g.generation, drop });
  // Recorded first: a grant declared again while this runs gets a fresh generation (the one
  // after these), which nothing below touches; one needed again already is left alone.
  const intent = await mutateJson(store.kv.grants, key, Grant, (cur) =>
    cur && isUnneeded(cur) && cur.generation === g.generation && !(cur.revoked?.generation === g.generation)
      ? { ...cur, revoked: { at: new Date().toISOString(), generation: g.generation, dropped: drop, done: false } }
      : undefined,
  );
  if (!intent || !isUnneeded(intent) || intent.revoked?.generation !== g.generation) return undefined;
  if (provider) {
    const doc = provider === BUILTIN_SECRET_PROVIDER ? undefined : (await readJson(store.kv.providers, provider, ProviderDoc))?.value;
    if (provider !== BUILTIN_SECRET_PROVIDER && !doc) {
      // Nothing left to reach it through: say so, and keep it due (the provider may be applied again).
      await setTakeBackCondition(deps, key, {
        status: "False",
        reason: "ProvisionFailed",
        message: `cannot revoke ${g.id}: provider ${provider} is not registered any more; apply it again so its logins can be revoked`,
      });
      throw new MeshError("NotFound", `provider ${provider} of ${g.id} is not registered`, { retryable: true });
    }
    const ref = { module: g.module, requirement: g.requirement };
    const revokeAt = async (adapter: ProviderAdapter) => {
      if (drop) {
        await adapter.delete({ grant: ref });
      } else {
        // Every generation the store holds, and the current one: each stops logging in, the data stays.
        const stored = await credentials.generations(g.module, g.requirement);
        for (const generation of new Set([...stored, g.generation])) await adapter.retire({ grant: { ...ref, generation } });
      }
    };
    try {
      // A provider whose admin password is a mesh secret may hold another generation of it than the current one.
      await (doc ? withAdminSecret(deps, g.kind, doc, PROVISIONER_INSTANCE, revokeAt) : revokeAt(adapters.get(g.kind, undefined)));
    } catch (e) {
      glog.warn({ err: errorMessage(e) }, "revoking at the provider failed; tried again");
      await setTakeBackCondition(deps, key, {
        status: "False",
        reason: "ProvisionFailed",
        message: `revoking ${g.id} at provider ${provider} failed: ${errorMessage(e)}; tried again`,
      });
      throw e;
    }
  }
  await testPause(deps, "Revoked");
  // Only what it revoked: a generation made since (the grant needed again) stays.
  for (const generation of await credentials.generations(g.module, g.requirement)) {
    if (generation <= g.generation) await credentials.purgeGeneration(g.module, g.requirement, generation);
  }
  await testPause(deps, "Purged");
  glog.info(drop ? "taken back: the resource is dropped and its values erased" : "taken back: its logins are revoked and its values erased; its data is kept");
  return mutateJson(store.kv.grants, key, Grant, (cur) => {
    // Needed again and given a new generation meanwhile (which cleared the record): nothing to say.
    if (!cur || cur.revoked?.generation !== g.generation || cur.revoked.done !== false) return undefined;
    if (!isUnneeded(cur)) return { ...cur, revoked: { ...cur.revoked, done: true } };
    const next: Grant = {
      ...cur,
      revoked: { at: new Date().toISOString(), generation: cur.generation, dropped: drop, done: true },
      conditions: cur.conditions.filter((c) => c.type !== "Verified"),
    };
    next.conditions = setCondition(next.conditions, {
      type: "Provisioned",
      status: "False",
      reason: "NoInstalledPart",
      message: `${cur.removal ? `taken back (${cur.removal.reason})` : `not needed by an installed part (${cur.parts.join(", ")})`}: ${revokedWords(cur, provider, drop)}`,
    });
    next.conditions = withDeliveredCondition(next);
    return next;
  });
}

/** What taking `g` back did at its provider, in words; for a certificate, that it is not renewed and until when it stays valid. */
function revokedWords(g: Grant, provider: string | null | undefined, drop: boolean): string {
  const generations = `generation${g.generation > 1 ? `s 1-${g.generation}` : ` ${g.generation}`}`;
  const until = validAfterRevocation(g);
  if (until)
    return `${generations} no longer renewed; the last one issued stays valid until ${until}, when it expires (a certificate cannot be disabled before)`;
  return `${generations} revoked at ${provider ?? "its provider"}${drop ? ", the resource dropped" : ", the data kept"}`;
}

/** Asks the agent of every holder that is no longer a target to remove its binding (again at every reconcile until its receipt says it did). */
async function withdraw(deps: ProvisionDeps, g: Grant): Promise<void> {
  const { store, log } = deps;
  for (const h of pendingWithdrawals(g)) {
    const [node, part] = h.split("/") as [string, string];
    const generation = Math.max(g.generation, 1);
    const d: Delivery = {
      grant: g.id,
      module: g.module,
      requirement: g.requirement,
      part,
      node,
      kind: g.kind,
      provider: g.provider ?? BUILTIN_SECRET_PROVIDER,
      generation,
      publishedAt: new Date().toISOString(),
      withdraw: true,
    };
    await store.js.publish(subjects.delivery(node, g.module, part, g.requirement), JSON.stringify(d), {
      // The holding it withdraws (when it was delivered): a later withdrawal of a new holding is not a repeat.
      msgID: `${g.id}@${g.createdAt ?? ""}:withdraw:g${generation}:${node}:${part}:${g.holders[h]?.deliveredAt ?? ""}`,
      headers: traceHeaders(),
    });
    // SDK instances of the part hear it on a subject of its own (a rotation's deliveries do not reach them).
    store.nc.publish(subjects.withdrawal(node, g.module, part, g.requirement), JSON.stringify(d));
    log.debug({ grant: g.id, node, part }, "withdrawal announced");
  }
}

/** A removed grant taken back entirely: deleted, or kept as retained when its data was kept. */
async function finish(deps: ProvisionDeps, key: string, g: Grant): Promise<void> {
  const { store, log } = deps;
  if (g.revoked && !g.revoked.dropped) {
    await mutateJson(store.kv.grants, key, Grant, (cur) =>
      cur && removalDone(cur) && !cur.retained ? { ...cur, removal: undefined, retained: { since: new Date().toISOString() } } : undefined,
    );
    log.info({ grant: g.id }, "taken back; its data is retained");
    return;
  }
  const cur = await store.kv.grants.get(key);
  if (!cur || cur.operation !== "PUT") return;
  // Deleted only as it was read: a grant declared again meanwhile is left to the next reconcile.
  const still = Grant.safeParse(entryJson(cur));
  if (!still.success || !removalDone(still.data)) return;
  await store.kv.grants.delete(key, { previousSeq: cur.revision });
  log.info({ grant: g.id }, "taken back; the grant is removed");
}

async function setTakeBackCondition(deps: ProvisionDeps, key: string, c: Omit<Condition, "type" | "observedAt">): Promise<void> {
  await mutateJson(deps.store.kv.grants, key, Grant, (cur) => {
    if (!cur) return undefined;
    const conditions = setCondition(cur.conditions, { type: "Provisioned", ...c });
    return conditions === cur.conditions ? undefined : { ...cur, conditions };
  }).catch(() => undefined);
}
